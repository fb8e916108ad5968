"""``freshet run <pipeline> --from <topic> --to <sink>``: a pipeline as a Spark streaming query."""

from __future__ import annotations

import json
import os
import re
import signal
import sys

import click

from .common import bootstrap_option, stderr_to


def _list_pipelines(ctx: click.Context, _param, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from freshet.pipelines.catalog import CATALOG

    for name, entry in sorted(CATALOG.items()):
        reads = ",".join(i.upper().replace(" ", "_") for i in entry.inputs)
        where = "postgres:TABLE only" if entry.postgres_only else "any sink"
        click.echo(f"{name:20} --from {reads:17} {where:20} {entry.summary}")
    ctx.exit(0)


@click.command()
@click.option("--list", "list_", is_flag=True, expose_value=False, is_eager=True, callback=_list_pipelines,
              help="Name every pipeline, what it reads and computes, and exit.")
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
@click.option("--spark-log", default=None,
              help="Where the Spark JVM's and its Python workers' output goes (default <checkpoint>.spark.log).")
@click.option("--master", envvar="FRESHET_SPARK_MASTER", default=None,
              help="Spark master: local[N] (default local[2]) or spark://HOST:PORT, a standalone cluster "
                   "(freshet spark start-cluster); env FRESHET_SPARK_MASTER.")
@click.option("--remote", envvar="FRESHET_SPARK_REMOTE", default=None,
              help="sc://HOST:PORT: run the pipeline on a Spark Connect server (freshet spark start-connect); "
                   "env FRESHET_SPARK_REMOTE.")
@click.option("--spark-conf", "spark_conf", multiple=True, metavar="KEY=VALUE",
              help="A Spark setting for this pipeline's session (repeatable), e.g. spark.cores.max=2.")
@bootstrap_option
def run(pipeline: str, source_topic: str, sink: str, checkpoint: str | None, starting_offsets: str, lateness: str,
        trigger_seconds: float, available_now: bool, max_offsets_per_trigger: int | None, pg_dsn: str | None,
        spark_log: str | None, master: str | None, remote: str | None, spark_conf: tuple[str, ...],
        bootstrap: str) -> None:
    """Run PIPELINE from a topic to a sink until stopped (Ctrl-C stops it cleanly).

    `freshet run --list` names every pipeline, what it reads and what it computes."""
    engine = _engine(master, remote, spark_conf)  # before the pipelines' imports: they import PySpark and pandas
    from freshet.client import TopicAdmin
    from freshet.client.errors import ClientError
    from freshet.pipelines.runner import PipelineError, PipelineSpec, check
    from freshet.pipelines.runner import pipeline as catalog_entry

    kind, _, target = sink.partition(":")
    checkpoint = checkpoint or os.path.join("checkpoints", f"{pipeline}-{sink.replace(':', '-').replace('/', '_')}")
    spec = PipelineSpec(pipeline, source_topic, sink, bootstrap, checkpoint, starting_offsets, lateness,
                        trigger_seconds, available_now, max_offsets_per_trigger, pg_dsn)
    # what can be known to be wrong is said before Spark starts (that takes 10 s or more)
    try:
        topics = check(spec)
        existing = TopicAdmin(bootstrap).list_topics()
    except (PipelineError, ClientError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    missing = [t for t in topics if t not in existing]
    if missing:
        click.echo(f"error: topic(s) {', '.join(missing)} do not exist (freshet topic create NAME)", err=True)
        sys.exit(1)
    if kind == "topic" and target not in existing:
        click.echo(f"error: output topic {target} does not exist (freshet topic create {target})", err=True)
        sys.exit(1)
    if pg_dsn and (kind == "postgres" or catalog_entry(pipeline).postgres_only):
        import psycopg2

        try:
            psycopg2.connect(pg_dsn, connect_timeout=10).close()
        except psycopg2.Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            click.echo(f"error: cannot connect to PostgreSQL: {first}", err=True)  # not the DSN: it may hold a password
            sys.exit(1)
    spark_log = spark_log or f"{checkpoint.rstrip(os.sep)}.spark.log"
    try:
        with stderr_to(spark_log) as terminal:
            code = _run_query(spec, kind, spark_log, terminal, engine)
    except KeyboardInterrupt:  # before the query ran: nothing to stop
        code = 130
    sys.exit(code)


def _engine(master: str | None, remote: str | None, spark_conf: tuple[str, ...]) -> dict:
    """The session() arguments for --master / --remote / --spark-conf; a wrong one is one line and exit 1."""
    if master and remote:
        click.echo("error: --master and --remote exclude each other (a Connect server has its own master)", err=True)
        sys.exit(1)
    if master and not re.match(r"^(local(\[(\d+|\*)(,\d+)?\])?|spark://[^\s/]+:\d+(,[^\s/]+:\d+)*|yarn|k8s://\S+)$", master):
        click.echo(f"error: --master must be local[N], spark://HOST:PORT, yarn or k8s://URL, got {master!r}", err=True)
        sys.exit(1)
    if remote and not re.match(r"^sc://[^\s/:]+(:\d+)?(/.*)?$", remote):
        click.echo(f"error: --remote must be sc://HOST:PORT, got {remote!r}", err=True)
        sys.exit(1)
    address = (remote or master or "").split("://", 1)[-1].split("/")[0]
    if (master or "").startswith("spark://") or remote:
        host, _, port = address.split(",")[0].rpartition(":")
        if not host:
            host, port = port, "15002"
        import socket

        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as exc:
            what = "Spark Connect server" if remote else "Spark master"
            click.echo(f"error: cannot reach the {what} at {host}:{port}: {exc.strerror or exc}", err=True)
            sys.exit(1)
    extra = {}
    for item in spark_conf:
        key, eq, value = item.partition("=")
        if not eq or not key.strip().startswith("spark."):
            click.echo(f"error: --spark-conf takes spark.KEY=VALUE, got {item!r}", err=True)
            sys.exit(1)
        extra[key.strip()] = value
    return {"master": master, "remote": remote, "extra": extra}


def _spark_ui(spark) -> str | None:
    """Where the application's Spark UI is (None over Spark Connect, or when the UI is off)."""
    from freshet.spark.session import is_connect

    if is_connect(spark):
        return None
    try:
        return spark.sparkContext.uiWebUrl
    except Exception:  # noqa: BLE001 (a stopped context)
        return None


def _run_query(spec, kind: str, spark_log: str, terminal, engine: dict) -> int:
    """Start the query and wait for it; Spark's own output goes to ``spark_log``, what the user must
    see to ``terminal``. Returns the exit status."""
    from pyspark.errors import StreamingQueryException

    from freshet.pipelines.runner import PipelineError, start
    from freshet.spark import session
    from freshet.spark.registry import PipelineReporter
    from freshet.spark.session import is_connect, registered_executors, stop_gracefully, task_slots

    def say(message: str) -> None:
        click.echo(message, file=terminal)

    where = engine["remote"] or engine["master"] or "local"
    say(f"starting Spark on {where} (Spark's log: {spark_log})")
    try:
        spark = session(f"freshet-{spec.pipeline}", master=engine["master"], remote=engine["remote"],
                        extra=engine["extra"])
    except Exception as exc:  # noqa: BLE001 (an unreachable master or Connect server: one line)
        say(f"error: cannot start Spark on {where}: {reason(exc)}")
        return 1
    if not registered_executors(spark):
        say(f"warning: {where} has given this application no executors yet: free cores and memory (freshet spark "
            "status), or ask for less: --spark-conf spark.cores.max=N, spark.executor.memory=...")
    reporter = PipelineReporter(spec.bootstrap, spark, command=["run", *sys.argv[sys.argv.index("run") + 1:]]
                                if "run" in sys.argv else None, engine=where, spark_ui=_spark_ui(spark))
    # shows up on the dashboard. A Connect client's listener would run on a listener bus of its own (a gRPC
    # stream and threads in this process, which left `freshet run --remote` hanging at exit once in a test run):
    # there the main loop below polls the query's progress instead
    listening = not is_connect(spark)
    if listening:
        spark.streams.addListener(reporter)

    def finish() -> None:
        if listening:
            spark.streams.removeListener(reporter)  # the JVM would call it after this interpreter has gone
        reporter.close()
        spark.stop()  # drains Spark's listener bus while Python still answers it

    try:
        query = start(spark, spec)
    except PipelineError as exc:
        say(f"error: {exc}")
        finish()
        return 1
    except Exception as exc:  # noqa: BLE001 (Spark analysis errors, unreachable cluster: one line)
        say(f"error: cannot start {spec.pipeline}: {reason(exc)}")
        finish()
        return 1
    say(f"running {spec.pipeline} from {spec.source_topic} to {kind} on {task_slots(spark) or 'all'} task slots "
        f"(query {query.name}, checkpoint {spec.checkpoint})")

    def stop(*_args) -> None:
        stop_gracefully([query])

    signal.signal(signal.SIGTERM, stop)
    try:
        if listening:
            query.awaitTermination()
        else:
            reporter.publish(query.name, "running")
            last_batch = None
            while not query.awaitTermination(1.0):
                progress = query.lastProgress
                if progress and progress.get("batchId") != last_batch:
                    last_batch = progress.get("batchId")
                    reporter.report_progress(json.loads(progress.json) if hasattr(progress, "json") else progress)
    except KeyboardInterrupt:
        stop_gracefully([query])
    except StreamingQueryException:
        pass  # query.exception() below says it in one line
    failure = query.exception()  # asked before the session stops (a Connect client cannot ask after)
    # listener events are asynchronous: say "stopped" ourselves before the process ends
    reporter.publish(query.name, "failed" if failure is not None else "stopped")
    finish()
    if failure is not None:
        say(f"error: {spec.pipeline} failed: {reason(failure)} (more in {spark_log})")
        return 1
    return 0


def reason(exc: BaseException) -> str:
    """One line for an error out of Spark. A Python data source's error arrives as a Python traceback
    inside Spark's message; its last line ("SourceError: ...") is what the user needs."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
    if "Traceback (most recent call last)" in str(exc) and raised:
        return raised[-1].split(": ", 1)[1]
    return lines[0]
