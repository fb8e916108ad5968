"""The settings freshet.spark.session() gives a local SparkSession, seen in what a query writes."""

import json

from freshet.spark.session import FILE_SYSTEM_CHECKPOINT_MANAGER


def _counts_query(spark, src, ck):
    events = spark.readStream.schema("user string").json(str(src))
    return (events.groupBy("user").count().writeStream.outputMode("update").format("noop")
            .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())


def test_stateful_query_commits_changelogs_and_resumes(spark, tmp_path):
    src, ck = tmp_path / "in", tmp_path / "ck"
    src.mkdir()
    (src / "1.json").write_text("\n".join(json.dumps({"user": u}) for u in ["a", "b", "a"]))
    query = _counts_query(spark, src, ck)
    query.awaitTermination()
    assert query.exception() is None
    # RocksDB state commits write the microbatch's changes, not a whole snapshot
    changelogs = [p for p in (ck / "state").rglob("*.changelog")]
    assert changelogs, sorted(str(p.relative_to(ck)) for p in (ck / "state").rglob("*"))

    # a restart resumes from the changelog-checkpointed state: "a" goes on from 2
    (src / "2.json").write_text(json.dumps({"user": "a"}))
    rows = []
    events = spark.readStream.schema("user string").json(str(src))
    query = (events.groupBy("user").count().writeStream.outputMode("update")
             .foreachBatch(lambda df, _id: rows.extend(df.collect()))
             .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None
    assert {(r["user"], r["count"]) for r in rows} == {("a", 3)}


def test_local_session_writes_checkpoints_with_the_file_system_manager(spark, tmp_path):
    assert spark.conf.get("spark.sql.streaming.checkpointFileManagerClass") == FILE_SYSTEM_CHECKPOINT_MANAGER
    src, ck = tmp_path / "in", tmp_path / "ck"
    src.mkdir()
    (src / "1.json").write_text(json.dumps({"user": "a"}))
    query = _counts_query(spark, src, ck)
    query.awaitTermination()
    assert query.exception() is None
    # the offset and commit logs are complete files under their batch ids, no temporary file left
    assert sorted(p.name for p in (ck / "offsets").iterdir() if not p.name.startswith(".")) == ["0"]
    assert sorted(p.name for p in (ck / "commits").iterdir() if not p.name.startswith(".")) == ["0"]
    assert not [p for p in ck.rglob("*.tmp")]


def test_python_workers_fork_from_freshets_preloading_daemon(spark):
    def parent(batches):
        import os

        import pyarrow as pa

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            command = f.read().replace(b"\0", b" ").decode()
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"parent": [command]})

    rows = spark.range(1).mapInArrow(parent, "parent string").collect()
    assert "-m freshet.spark.daemon pyspark.worker" in rows[0].parent
