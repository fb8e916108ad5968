"""A class-data-sharing archive of Spark's classes for the JVMs the tests start (AppCDS, JDK 13+).

Each Spark JVM (a driver, the cluster's master, workers, executors, the Connect server) parses and verifies
some ten thousand classes from Spark's jars when it starts, which costs more CPU than anything else in a short
test: a bare session and one small job took 11.5 CPU-s here, 6.0 with the archive. The archive is made once per
virtualenv (``make test`` on a fresh clone makes it while the first tests run) by a small Spark workload with
``-XX:ArchiveClassesAtExit``, and every later JVM maps it with ``-XX:SharedArchiveFile``. A JVM for which the
archive does not fit (another classpath, another JDK) or which starts before it exists loads its classes as
usual: the JVM checks the archive, so it changes no behaviour, only the CPU spent.

``python -m freshet.testing.class_archive PATH`` makes the archive at PATH (written beside it, then renamed).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from importlib import metadata

# the JVM says nothing about an archive it cannot use (the default is a warning on stdout)
QUIET = "-Xlog:cds*=off"
# a lock older than this is taken for one left by a killed run
STALE_LOCK_S = 600


def archive_path() -> str:
    """Where this virtualenv keeps the archive: one per PySpark version and Java installation (the JVM checks
    the rest, and maps no archive that does not fit)."""
    import hashlib
    import shutil

    try:
        version = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        version = "none"
    java = os.environ.get("JAVA_HOME") or os.path.realpath(shutil.which("java") or "java")
    try:
        java += f"@{os.stat(java).st_mtime_ns}"
    except OSError:
        pass
    return os.path.join(sys.prefix, "spark-cds", f"pyspark-{version}-{hashlib.sha1(java.encode()).hexdigest()[:8]}.jsa")


def wait_while_made(path: str, timeout: float) -> bool:
    """Wait up to ``timeout`` s while a process makes the archive (its lock is there); whether it exists."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and os.path.exists(f"{path}.lock") and time.monotonic() < deadline:
        time.sleep(0.5)
    return os.path.exists(path)


def java_options(path: str) -> str:
    """The options a JVM maps the archive with (nothing happens when it does not exist)."""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def make_in_background(path: str, log: str | None = None) -> subprocess.Popen | None:
    """Start making the archive at ``path`` unless it exists or another process is making it; the process."""
    if os.path.exists(path):
        return None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lock = f"{path}.lock"
    try:
        if time.time() - os.path.getmtime(lock) > STALE_LOCK_S:
            os.remove(lock)
    except OSError:
        pass
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return None
    with open(log or f"{path}.log", "wb") as out:
        return subprocess.Popen([sys.executable, "-m", __name__, path], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _workload(spark, scratch: str) -> None:
    """What the tests' JVMs do most: SQL with joins and aggregations, a windowed streaming aggregation with
    RocksDB state through a Python data source into Parquet, a foreachBatch, Arrow to and from pandas."""
    from pyspark.sql import functions as F

    rows = spark.range(2000).select((F.col("id") % 7).alias("k"), F.col("id").alias("v"),
                                    F.timestamp_seconds(F.col("id") * 3).alias("ts"))
    rows.join(rows.groupBy("k").agg(F.sum("v").alias("total")), "k").orderBy("k").collect()
    rows.groupBy(F.window("ts", "1 minute"), "k").count().toPandas()
    spark.createDataFrame(rows.limit(10).toPandas()).selectExpr("k", "v + 1").collect()
    spark.sql("SELECT k, count(*) FROM VALUES (1), (2), (2) AS t(k) GROUP BY k").collect()

    spark.dataSource.register(_Numbers)
    events = (spark.readStream.format("archive-numbers").load()
              .withWatermark("ts", "1 minute").groupBy(F.window("ts", "1 minute"), "k").count())
    query = (events.writeStream.format("parquet").outputMode("append").option("path", f"{scratch}/out")
             .option("checkpointLocation", f"{scratch}/ck").trigger(availableNow=True).start())
    query.awaitTermination(300)
    query = (spark.readStream.format("archive-numbers").load().writeStream
             .foreachBatch(lambda batch, _id: batch.count()).option("checkpointLocation", f"{scratch}/ck2")
             .trigger(availableNow=True).start())
    query.awaitTermination(300)


try:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class _NumbersReader(DataSourceStreamReader):
        """Three batches of 500 numbered events, a second apart in event time."""

        def initialOffset(self) -> dict:
            return {"at": 0}

        def latestOffset(self) -> dict:
            return {"at": 1500}

        def partitions(self, start: dict, end: dict) -> list:
            return [InputPartition((i, min(i + 500, end["at"]))) for i in range(start["at"], end["at"], 500)]

        def read(self, partition):
            import datetime

            first, last = partition.value
            for i in range(first, last):
                yield i % 5, datetime.datetime.fromtimestamp(i, tz=datetime.timezone.utc)

    class _Numbers(DataSource):
        @classmethod
        def name(cls) -> str:
            return "archive-numbers"

        def schema(self) -> str:
            return "k int, ts timestamp"

        def streamReader(self, schema):
            return _NumbersReader()
except ImportError:  # no PySpark: nothing to archive
    pass


def make(path: str) -> int:
    """Run the workload in a JVM that writes its loaded classes to ``path`` when it exits."""
    import shutil
    import tempfile

    from freshet.spark import session

    staging = f"{path}.{os.getpid()}.tmp"
    scratch = tempfile.mkdtemp(prefix="freshet-cds-")
    os.environ["SPARK_SUBMIT_OPTS"] = f"-XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit={staging} {QUIET}"
    try:
        spark = session("freshet-class-archive", shuffle_partitions=2)
        try:
            _workload(spark, scratch)
        finally:
            spark.stop()
        from pyspark import SparkContext

        jvm = SparkContext._gateway.proc  # spark-submit execs the JVM: it ends, and writes the archive, on EOF
        jvm.stdin.close()
        jvm.wait(timeout=300)
        if os.path.getsize(staging) > 0:
            os.replace(staging, path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        for leftover in (staging, f"{path}.lock"):
            try:
                os.remove(leftover)
            except OSError:
                pass
    return 0 if os.path.exists(path) else 1


if __name__ == "__main__":
    sys.exit(make(sys.argv[1]))
