"""A local SparkSession with settings that suit this kind of machine, with ``freshet`` registered."""

from __future__ import annotations

import os
import sys
import tempfile

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
FILE_SYSTEM_CHECKPOINT_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")


def register(spark) -> None:
    """Make ``format("freshet")`` available on ``spark``."""
    from .source import FreshetDataSource

    spark.dataSource.register(FreshetDataSource)


# SQL settings every Freshet session runs with, a local one or a Spark Connect client's (runtime settings: a
# Connect client sets them on its server session)
SQL_CONF = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    # a microbatch writes only the state changes (a changelog per partition) instead of uploading a
    # snapshot of the RocksDB state to the checkpoint; snapshots are made in the background.
    # Measured with the windowed count at 20k events/s: state commit 250 -> 110 ms per microbatch
    # (with the checkpoint manager below: 106 -> 7 ms)
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.noDataMicroBatches.enabled": "true",
}


def on_this_machine(master: str) -> bool:
    """A local master, or a standalone cluster or Spark Connect server on this machine (whose checkpoints are
    local files)."""
    host = master.split("://", 1)[-1].split("/")[0].split(":")[0]
    return master.startswith("local") or host in ("127.0.0.1", "localhost")


def _sql_conf(master: str, shuffle_partitions: int) -> dict[str, str]:
    conf = {**SQL_CONF, "spark.sql.shuffle.partitions": str(shuffle_partitions)}
    if on_this_machine(master):
        # Without Hadoop's native library (not in pip's PySpark), the default FileContext-based
        # checkpoint manager forks `chmod` and `readlink` processes for every checkpoint file it writes
        # (~20 forks per microbatch, ~40 ms per offset or commit log entry here). The FileSystem-based
        # one writes a temporary file and renames it, which the local file system does atomically:
        # offset and commit log entries 42-45 -> 12-13 ms, the live windowed count's median microbatch
        # 0.67 -> 0.33 s. Left at Spark's default for a cluster elsewhere, whose checkpoints live on HDFS or S3.
        conf["spark.sql.streaming.checkpointFileManagerClass"] = FILE_SYSTEM_CHECKPOINT_MANAGER
    return conf


# pip's PySpark puts its own python/lib/pyspark.zip first on every Python worker's PYTHONPATH, so a worker
# imports PySpark from the zip, which keeps no compiled bytecode: each new worker process compiles the PySpark
# modules it needs again (its streaming-source runner: 0.6 s of CPU from the zip, 0.2 s from site-packages,
# measured here). A Python streaming source's runner must connect back to the JVM within a fixed 10 s, which a
# busy machine missed ("Python worker failed to connect back"). The launcher drops the zip from PYTHONPATH, so
# workers import the same PySpark the driver imported, from site-packages with its bytecode.
_LAUNCHER = """#!/bin/sh
set -f
new=
IFS=:
for entry in $PYTHONPATH; do
  case $entry in
    */pyspark.zip) ;;
    *) new=${new:+$new:}$entry ;;
  esac
done
unset IFS
PYTHONPATH=$new
export PYTHONPATH
exec %s "$@"
"""


def worker_python() -> str:
    """The command Spark starts Python workers with: this interpreter, through a launcher that keeps pip's
    pyspark.zip off the worker's path (see _LAUNCHER), when PySpark is pip's in this interpreter's
    site-packages (else this interpreter as it is: a SPARK_HOME install's workers need their zip). The launcher
    is written once per interpreter into a directory of this user's alone, and used only while it is this
    user's, writable by nobody else, and holds exactly the launcher."""
    import hashlib
    import shlex
    import sysconfig

    import pyspark

    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    if not os.path.realpath(pyspark.__file__).startswith(site + os.sep):
        return sys.executable
    script = _LAUNCHER % shlex.quote(sys.executable)
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "freshet")
    path = os.path.join(cache, "python-worker-" + hashlib.sha256(script.encode()).hexdigest()[:16])
    try:
        os.makedirs(cache, mode=0o700, exist_ok=True)
        if not _is_own_file(path, script):
            staging = f"{path}.{os.getpid()}"
            with open(os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700), "w") as f:
                f.write(script)
            os.replace(staging, path)
        if not _is_own_file(path, script):
            return sys.executable
    except OSError:
        return sys.executable  # no cache directory to write: workers import PySpark from the zip, slower
    return path


def _is_own_file(path: str, content: str) -> bool:
    import stat

    try:
        info = os.lstat(path)
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid()
                or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or not info.st_mode & stat.S_IXUSR):
            return False
        with open(path) as f:
            return f.read() == content
    except OSError:
        return False


def session(app_name: str = "freshet", master: str | None = None, shuffle_partitions: int = 4,
            driver_memory: str = "2g", extra: dict | None = None, remote: str | None = None):
    """Build (or get) a SparkSession: few shuffle partitions, RocksDB state store, quiet logs.

    ``master`` defaults to $FRESHET_SPARK_MASTER or local[2] (``spark://HOST:PORT``: a standalone cluster,
    whose Spark UI is then on). Executors run this interpreter, so they import Freshet as the driver does.
    ``remote`` (``sc://HOST:PORT``, or $FRESHET_SPARK_REMOTE) makes a Spark Connect client session instead:
    the queries run on the server, whose Python must have Freshet installed.
    """
    remote = remote or os.environ.get("FRESHET_SPARK_REMOTE")
    if remote:
        return connect_session(remote, shuffle_partitions, extra)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if "PYSPARK_PYTHON" not in os.environ:
        os.environ["PYSPARK_PYTHON"] = worker_python()
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    log4j = os.path.join(os.path.dirname(__file__), "log4j2.properties")
    master = master or os.environ.get("FRESHET_SPARK_MASTER", "local[2]")
    local = master.startswith("local")
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.showConsoleProgress", "false")
        # on a cluster the dashboard links to the application's UI (its executors, tasks, lost workers)
        .config("spark.ui.enabled", "false" if local else "true")
        # a deep regex backtrack in a stream thread overflowed the default 1 MB stack when queries stopped
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j} -Xss16m")
        .config("spark.sql.warehouse.dir", os.path.join(tempfile.gettempdir(), "freshet-spark-warehouse"))
        # the JVM talks to its Python workers over Unix domain sockets instead of loopback TCP: a
        # Python task (a source read, a foreachBatch, a stateful operator) starts in ~18 ms
        # instead of ~55 ms here, which every microbatch pays per task
        .config("spark.python.unix.domain.socket.enabled", "true")
        # workers fork from a daemon that imported pandas, PyArrow and Freshet's source, sink and matchers once
        # (freshet.spark.daemon): each new worker imported them again, ~0.8 s of CPU
        .config("spark.python.daemon.module", "freshet.spark.daemon")
    )
    for key, value in {**_sql_conf(master, shuffle_partitions), **(extra or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    if not local:
        _wait_for_executors(spark)
    return spark


def _wait_for_executors(spark, timeout_s: float = 60.0) -> None:
    """On a cluster, wait until the scheduler counts enough executors (Spark's own test: the cores of
    spark.cores.max times spark.scheduler.minRegisteredResourcesRatio, or its maxRegisteredResourcesWaitingTime),
    so that ``task_slots`` sees the cluster's cores rather than the 2 it reports while none have registered."""
    import time

    backend = spark.sparkContext._jsc.sc().schedulerBackend()
    deadline = time.monotonic() + timeout_s
    while not backend.isReady() and time.monotonic() < deadline:
        time.sleep(0.2)


def registered_executors(spark) -> int:
    """How many executors a cluster session has now (0: the cluster has given it none yet)."""
    if is_connect(spark) or spark.sparkContext.master.startswith("local"):
        return 1
    return max(0, int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1)  # less the driver


def connect_session(url: str, shuffle_partitions: int = 4, extra: dict | None = None):
    """A Spark Connect client session on ``url`` with Freshet's settings and the freshet source registered
    (the source's class travels to the server pickled; the server's Python workers import Freshet)."""
    if not url.startswith("sc://"):
        raise ValueError(f"a Spark Connect URL starts with sc://, got {url!r}")
    # PySpark's builder puts the whole process in Connect mode (its column functions then build Connect
    # expressions), so a process holds either local sessions or Connect ones: it refuses a remote session beside
    # a local one
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).getOrCreate()
    for key, value in {**_sql_conf(url, shuffle_partitions), **(extra or {})}.items():
        spark.conf.set(key, value)
    register(spark)
    return spark


def is_connect(spark) -> bool:
    """Whether ``spark`` is a Spark Connect client session (no SparkContext, no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def task_slots(spark) -> int:
    """How many tasks the session's executors run at once: the source deals a microbatch into that many.
    A local session: its threads; a cluster: its executors' cores; over Spark Connect: the server's
    spark.default.parallelism (``freshet spark start-connect`` sets it to the cores it holds)."""
    if is_connect(spark):
        value = spark.conf.get("spark.default.parallelism", None)
        return int(value) if value and value.isdigit() and int(value) > 0 else 0
    return int(spark.sparkContext.defaultParallelism)


def stop_gracefully(queries, timeout_s: float = 20.0) -> None:
    """Stop streaming queries between microbatches, not in the middle of one (which makes Spark log
    aborted writes and interrupted state-store commits, harmless but alarming)."""
    import time

    deadline = time.monotonic() + timeout_s
    pending = [q for q in queries if q.isActive]
    while pending and time.monotonic() < deadline:
        for q in list(pending):
            if not q.status.get("isTriggerActive", False):
                q.stop()
                pending.remove(q)
        time.sleep(0.05)
    for q in pending:
        q.stop()


def kafka_security_options() -> dict[str, str]:
    """This process's client security settings (``freshet --command-config``, FRESHET_* variables) as the
    freshet source's and sink's ``kafka.*`` options, so a pipeline reads and writes a secured cluster."""
    from freshet.client.config import security_config

    return {f"kafka.{k}": v for k, v in security_config().items()}
