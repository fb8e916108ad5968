"""The Python worker daemon Freshet's sessions start (``spark.python.daemon.module``): PySpark's own daemon,
after importing once what every Python task of a pipeline imports.

Spark starts one daemon per worker module and forks each Python worker from it. PySpark's daemon imports
little, so every forked worker imported pandas, PyArrow, PySpark's SQL side and Freshet's source, sink and
matchers again when it unpickled its first function: ~0.8 s of CPU a worker, 4-6 workers a run (a py-spy
profile of a dense ``freshet run cep`` run put 13% of the Python workers' samples in imports). Imported here,
before the fork, a worker starts with them loaded. Only the default worker module (``pyspark.worker``, which
runs the sources' reads, ``mapInArrow``, the stateful steps and the sinks' writes) gets the preload: the
planning daemons Spark starts with another module (``pyspark.sql.worker.*``, one process each) run no task
that needs it. Nothing here starts a thread, so forking after it is safe; a module that cannot be imported
is left to the worker, as before.
"""

from __future__ import annotations

import importlib
import sys

# what a pipeline's tasks import (this package knows no pipeline: freshet.pipelines is cheap once these are in)
PRELOAD = ("pandas", "pyarrow", "pyarrow.compute", "orjson", "pyspark.worker", "pyspark.sql.pandas.serializers",
           "pyspark.sql.functions", "freshet.spark.source", "freshet.spark.sink", "freshet.client.columnar",
           "freshet.cep.matcher", "freshet.cep.search")


def preload(argv: list[str]) -> list[str]:
    """Import PRELOAD when the daemon forks default workers (``argv[1]`` is ``pyspark.worker``, or absent); the
    names imported."""
    if len(argv) > 1 and argv[1] != "pyspark.worker":
        return []
    done = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the worker imports (and reports) what it needs itself
            continue
        done.append(name)
    return done


if __name__ == "__main__":
    preload(sys.argv)
    from pyspark.daemon import manager

    manager()
