"""``freshet run <pipeline> --from <topic> --to <sink>``: a pipeline as a Spark streaming query."""

from __future__ import annotations

import os
import signal
import sys

import click

from .common import bootstrap_option


@click.command()
@click.argument("pipeline")
@click.option("--from", "source_topic", required=True,
              help="Topic to read (access logs); join pipelines read two: searches,clicks | activity,users | "
                   "tweets,follows.")
@click.option("--to", "sink", required=True, help="console | parquet:PATH | postgres:TABLE | topic:NAME")
@click.option("--checkpoint", default=None, help="Checkpoint directory (default ./checkpoints/<pipeline>-<sink>).")
@click.option("--starting-offsets", default="earliest", show_default=True)
@click.option("--lateness", default="2 minutes", show_default=True, help="Watermark delay: later events are dropped.")
@click.option("--trigger-seconds", default=2.0, show_default=True)
@click.option("--available-now", is_flag=True, help="Process what is there, then stop.")
@click.option("--max-offsets-per-trigger", type=int, default=None)
@click.option("--pg-dsn", envvar="FRESHET_PG_DSN", default=None, help="PostgreSQL DSN (env FRESHET_PG_DSN).")
@bootstrap_option
def run(pipeline: str, source_topic: str, sink: str, checkpoint: str | None, starting_offsets: str, lateness: str,
        trigger_seconds: float, available_now: bool, max_offsets_per_trigger: int | None, pg_dsn: str | None,
        bootstrap: str) -> None:
    """Run PIPELINE from a topic to a sink until stopped (Ctrl-C stops it cleanly).

    Access-log pipelines: requests-per-minute, hopping-average, size-percentiles, unique-users, sessions,
    count-windows, sliding-windows. Joins: click-through, favourite-urls, timeline."""
    from freshet.pipelines.runner import PipelineError, PipelineSpec, pipeline_names, start
    from freshet.spark import session

    if pipeline not in pipeline_names():
        click.echo(f"error: unknown pipeline {pipeline!r}; choose one of {', '.join(pipeline_names())}", err=True)
        sys.exit(1)
    kind = sink.partition(":")[0]
    checkpoint = checkpoint or os.path.join("checkpoints", f"{pipeline}-{sink.replace(':', '-').replace('/', '_')}")
    spec = PipelineSpec(pipeline, source_topic, sink, bootstrap, checkpoint, starting_offsets, lateness,
                        trigger_seconds, available_now, max_offsets_per_trigger, pg_dsn)
    spark = session(f"freshet-{pipeline}")
    from freshet.spark.registry import PipelineReporter

    reporter = PipelineReporter(bootstrap, spark, command=["run", *sys.argv[sys.argv.index("run") + 1:]]
                                if "run" in sys.argv else None)
    spark.streams.addListener(reporter)  # shows up on the dashboard
    try:
        query = start(spark, spec)
    except PipelineError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except Exception as exc:  # Spark analysis errors, unreachable cluster: one line
        click.echo(f"error: cannot start {pipeline}: {str(exc).splitlines()[0]}", err=True)
        sys.exit(1)
    click.echo(f"running {pipeline} from {source_topic} to {kind} (query {query.name}, checkpoint {checkpoint})",
               err=True)

    from freshet.spark.session import stop_gracefully

    def stop(*_args) -> None:
        stop_gracefully([query])

    signal.signal(signal.SIGTERM, stop)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        stop_gracefully([query])
    # listener events are asynchronous: say "stopped" ourselves before the process ends
    reporter.publish(query.name, "failed" if query.exception() is not None else "stopped")
    spark.streams.removeListener(reporter)  # the JVM would call it after this interpreter has gone
    reporter.close()
    spark.stop()  # drains Spark's listener bus while Python still answers it
    if query.exception() is not None:
        click.echo(f"error: {pipeline} failed: {str(query.exception()).splitlines()[0]}", err=True)
        sys.exit(1)
