"""One pipeline scenario, several engines: the tests' shared local SparkSession, or a Spark cluster reached through
Spark Connect by ``freshet run --remote`` (a process of its own: PySpark's functions serve either classic or
Connect sessions in one process, not both)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from freshet.pipelines.runner import PipelineSpec, start


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


@dataclass
class LocalEngine:
    """The shared local SparkSession (local[2])."""

    spark: object
    name: str = "local"

    def run(self, spec: PipelineSpec, timeout: float = 600):
        """Run ``spec`` (available-now) to its end; the finished StreamingQuery."""
        query = start(self.spark, spec)
        query.awaitTermination(timeout)
        assert query.exception() is None, query.exception()
        return query


@dataclass
class ConnectEngine:
    """A Spark Connect server on a standalone cluster: ``freshet run --remote URL``."""

    url: str
    name: str = "cluster"

    def run(self, spec: PipelineSpec, timeout: float = 600) -> subprocess.CompletedProcess:
        """Run ``spec`` (available-now) to its end through the CLI; its completed process."""
        out = subprocess.run([sys.executable, "-m", "freshet.cli.main", *run_arguments(spec), "--remote", self.url],
                             capture_output=True, text=True, timeout=timeout, check=False,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert out.returncode == 0, f"freshet run on {self.url} ended with {out.returncode}:\n{out.stderr[-3000:]}"
        return out
