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

import gc
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


# Python's cyclic collector runs a gen-0 pass every 700 net container allocations; a worker's stateful CEP step
# allocates millions (orjson.loads of the matchers' rows, the events' dicts), almost none of them cyclic, and
# py-spy put 10-20% of the step in gc_collect_main. Offline (benchmarks/cep_step.py, 400k dense events) a gen-0
# threshold of 50,000 took the step from 1.60 to 1.28 CPU s with the same alerts. Frozen, the daemon's preloaded
# heap (pandas, PyArrow, PySpark: the bulk of a worker's objects) is no longer scanned by each worker's older
# collections, nor by the gc.collect() PySpark's daemon runs after every task a reused worker finishes. On Spark
# (benchmarks/cep.py dense, 400k events, 3 alternating runs each) warm events per Spark CPU second went from
# 27,836 to 32,573 (Python workers 8.4 -> 5.3 CPU s), same alerts. Cycles are still collected, only less often.
GC_THRESHOLD = (50_000, 20, 20)


def tune_gc() -> None:
    """Before the daemon forks its workers: raise the gen-0 threshold (GC_THRESHOLD) and freeze what the daemon
    imported (``gc.freeze``), so no worker's collector scans the preloaded modules' objects again."""
    gc.set_threshold(*GC_THRESHOLD)
    gc.collect()
    gc.freeze()


if __name__ == "__main__":
    preload(sys.argv)
    tune_gc()
    from pyspark.daemon import manager

    manager()
