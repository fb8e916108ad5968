"""A Spark driver copying one topic to another through the exactly-once freshet sink, for kill -9 tests.

usage: topic_copy_driver.py BOOTSTRAP SOURCE SINK CHECKPOINT [--available-now]
"""

import sys

from freshet.spark import session


def main() -> None:
    bootstrap, source, sink, checkpoint = sys.argv[1:5]
    spark = session("exactly-once-copy", shuffle_partitions=2)
    reader = (spark.readStream.format("freshet").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest"))
    if "--available-now" not in sys.argv:  # small batches until the kill; after the restart the rest in one
        reader = reader.option("maxOffsetsPerTrigger", 1500)
    rows = reader.load().select("key", "value", "partition")
    writer = (rows.writeStream.format("freshet").option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
              .option("exactlyOnce", "true").option("checkpointLocation", checkpoint))
    if "--available-now" in sys.argv:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="0.5 seconds")
    query = writer.start()
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")


if __name__ == "__main__":
    main()
