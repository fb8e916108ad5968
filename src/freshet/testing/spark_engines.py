"""One pipeline scenario, several engines: the tests' shared local SparkSession, or a Spark cluster reached through
Spark Connect by ``freshet run --remote`` (a process of its own: PySpark's functions serve either classic or
Connect sessions in one process, not both).

A scenario with several pipelines or sinks runs them in one go (``run_all``): on the cluster in one Connect client
process, so it pays for one client start and one session instead of one per sink.

``python -m freshet.testing.spark_engines WHERE SPECS_JSON TIMEOUT_S`` is that process (``run_process``): it runs
each spec of the JSON list (``PipelineSpec`` fields) to its end on one session, a Spark Connect client's
(``sc://HOST:PORT``) or a local one (``local[N]``), and exits 1 saying which one failed."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from dataclasses import dataclass

from freshet.pipelines.runner import PipelineSpec, start


# the shuffle partitions of a scenario's queries on either engine, as the tests' shared local session has (the
# cluster's Connect server holds two cores): each stateful microbatch loads and commits a state store a
# partition, twice as many with freshet run's default of four, for the same answer
SHUFFLE_PARTITIONS = 2


def run_arguments(spec: PipelineSpec) -> list[str]:
    """``freshet run`` arguments that start ``spec``."""
    args = ["run", spec.pipeline, "--from", spec.source_topic, "--to", spec.sink, "--checkpoint", spec.checkpoint,
            "--starting-offsets", spec.starting_offsets, "--lateness", spec.lateness,
            "--trigger-seconds", str(spec.trigger_seconds), "--bootstrap", spec.bootstrap]
    if spec.available_now:
        args.append("--available-now")
    if spec.max_offsets_per_trigger:
        args += ["--max-offsets-per-trigger", str(spec.max_offsets_per_trigger)]
    if spec.pg_dsn:
        args += ["--pg-dsn", spec.pg_dsn]
    return args


def run_in_turn(spark, specs: list[PipelineSpec], timeout: float) -> list:
    """Run each (available-now) spec to its end, one after another; the finished StreamingQueries.

    In turn, not at once: each query starts a Python process for its source, which must connect back to Spark
    within Spark's fixed 10 s; several starting together on a busy machine miss it."""
    queries = []
    for spec in specs:
        query = start(spark, spec)
        query.awaitTermination(timeout)
        assert not query.isActive, f"{query.name} still runs after {timeout:g} s"
        assert query.exception() is None, f"{query.name} failed: {query.exception()}"
        queries.append(query)
    return queries


@dataclass
class LocalEngine:
    """The shared local SparkSession (local[2])."""

    spark: object
    name: str = "local"

    def run(self, spec: PipelineSpec, timeout: float = 600):
        """Run ``spec`` (available-now) to its end; the finished StreamingQuery."""
        return self.run_all([spec], timeout)[0]

    def run_all(self, specs: list[PipelineSpec], timeout: float = 600) -> list:
        """Run every spec (available-now) to its end, in turn; the finished StreamingQueries."""
        return run_in_turn(self.spark, specs, timeout)


@dataclass
class ConnectEngine:
    """A Spark Connect server on a standalone cluster: ``freshet run --remote URL``."""

    url: str
    name: str = "cluster"

    def run(self, spec: PipelineSpec, timeout: float = 600) -> subprocess.CompletedProcess:
        """Run ``spec`` (available-now) to its end through the CLI; its completed process."""
        out = subprocess.run([sys.executable, "-m", "freshet.cli.main", *run_arguments(spec), "--remote", self.url,
                              "--spark-conf", f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}"],
                             capture_output=True, text=True, timeout=timeout, check=False,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert out.returncode == 0, f"freshet run on {self.url} ended with {out.returncode}:\n{out.stderr[-3000:]}"
        return out

    def run_all(self, specs: list[PipelineSpec], timeout: float = 600) -> subprocess.CompletedProcess:
        """Run every spec (available-now) to its end, in turn, in one Connect client process."""
        out = subprocess.run(run_process(self.url, specs, timeout), capture_output=True, text=True,
                             timeout=timeout + 120, check=False, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert out.returncode == 0, f"the pipelines on {self.url} ended with {out.returncode}:\n{out.stderr[-3000:]}"
        return out


def run_process(where: str, specs: list[PipelineSpec], timeout: float = 600) -> list[str]:
    """The command that runs ``specs`` in turn in one process of its own: on a Spark Connect server
    (``sc://HOST:PORT``) or in a local session of that process (``local[N]``, one JVM for all of them)."""
    return [sys.executable, "-m", __name__, where, json.dumps([dataclasses.asdict(spec) for spec in specs]),
            str(timeout)]


def main(argv: list[str]) -> int:
    from freshet.spark import session

    where, listed, timeout = argv
    engine = {"remote": where} if where.startswith("sc://") else {"master": where}
    spark = session("freshet-tests", shuffle_partitions=SHUFFLE_PARTITIONS, **engine)
    try:
        run_in_turn(spark, [PipelineSpec(**fields) for fields in json.loads(listed)], float(timeout))
    except AssertionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
