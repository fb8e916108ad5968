"""The Python worker daemon Freshet's sessions start imports what every pipeline task imports once, before
forking workers; the planning daemons Spark starts with another worker module import nothing more."""

import subprocess
import sys

PROBE = ("import sys; from freshet.spark.daemon import preload; done = preload(sys.argv); "
         "print(sorted(done)); print('pandas' in sys.modules, 'freshet.cep.matcher' in sys.modules)")


def _run(*argv: str) -> list[str]:
    return subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True,
                          check=True).stdout.splitlines()


def test_the_default_worker_daemon_preloads_pandas_arrow_and_freshet():
    from freshet.spark.daemon import PRELOAD

    out = _run("pyspark.worker")
    assert out == [str(sorted(PRELOAD)), "True True"]
    assert _run()[1] == "True True"  # no worker module named: PySpark's default, pyspark.worker


def test_a_planning_daemon_preloads_nothing():
    assert _run("pyspark.sql.worker.lookup_data_sources") == ["[]", "False False"]


def test_the_daemon_raises_the_gc_threshold_and_freezes_its_heap_before_forking():
    probe = ("import gc; from freshet.spark.daemon import GC_THRESHOLD, preload, tune_gc; preload(['d']); "
             "before = gc.get_freeze_count(); tune_gc(); "
             "print(gc.get_threshold() == GC_THRESHOLD, before == 0, gc.get_freeze_count() > 10_000)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True", "True"]
