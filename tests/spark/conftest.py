import os

import pytest

from freshet.testing.cli import freshet


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for every Spark test (start-up costs ~10 s on 2 cores)."""
    from freshet.spark import session

    s = session("freshet-tests", shuffle_partitions=2)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A Spark standalone cluster started as a user starts one (freshet spark start-cluster): two workers of two
    cores and 3 GB each (what the master hands out, not what is used), and a Spark Connect server holding one
    core and one 1 GB executor on each; the rest is left for `freshet run --master` drivers. Stopped with
    stop-cluster."""
    from freshet.local.spark_cluster import SparkCluster
    from freshet.spark.session import worker_python
    from freshet.testing import class_archive

    # the cluster's JVMs live for the whole run: on a fresh clone they wait for the class archive the run makes
    class_archive.wait_while_made(class_archive.archive_path(), timeout=180)
    directory = str(tmp_path_factory.mktemp("spark-cluster"))
    where = ("--dir", directory)
    # the cluster's JVMs (master, workers, the executors the workers start, the Connect server) run with the
    # options of the tests' drivers (C1 only, the class archive: tests/conftest.py); spark-submit's variable
    # does not reach the daemons and executors, the JVM's own does (each says "Picked up..." in its log)
    jvm = {"JAVA_TOOL_OPTIONS": os.environ.get("SPARK_SUBMIT_OPTS", "")}
    # their Python workers start as a local session's do, through the launcher that keeps pip's pyspark.zip off
    # their path (each worker compiled PySpark from the zip again: freshet.spark.session.worker_python), whether
    # or not a local session in this process has set PYSPARK_PYTHON before the cluster starts
    jvm["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON") or worker_python()
    started = freshet("spark", "start-cluster", "--workers", "2", "--cores", "2", "--memory", "3g", "--port", "0",
                      "--ui-port", "0", *where, env=jvm)
    assert started.returncode == 0, started.stderr
    try:
        connect = freshet("spark", "start-connect", "--port", "0", "--cores", "2", *where, env=jvm)
        assert connect.returncode == 0, connect.stderr
        cluster = SparkCluster(directory)
        assert cluster.attach()
        yield cluster
    finally:
        stopped = freshet("spark", "stop-cluster", *where)
        assert stopped.returncode == 0, stopped.stderr


@pytest.fixture(params=["local", "cluster"])
def engine(request):
    """Where a scenario runs: the shared local session, or the cluster through Spark Connect."""
    from freshet.testing.spark_engines import ConnectEngine, LocalEngine

    if request.param == "local":
        return LocalEngine(request.getfixturevalue("spark"))
    return ConnectEngine(request.getfixturevalue("spark_cluster").connect_url)
