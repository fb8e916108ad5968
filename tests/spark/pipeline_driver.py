"""A Spark driver running requests-per-minute into Parquet and PostgreSQL at once, for kill -9 tests.

usage: pipeline_driver.py BOOTSTRAP TOPIC OUT_DIR PG_DSN [--available-now]
"""

import os
import sys

from freshet.pipelines.runner import PipelineSpec, start
from freshet.spark import session


def main() -> None:
    bootstrap, topic, out_dir, dsn = sys.argv[1:5]
    available_now = "--available-now" in sys.argv
    spark = session("kill-test", shuffle_partitions=2)
    queries = []
    for sink, name in ((f"parquet:{os.path.join(out_dir, 'parquet')}", "parquet"), ("postgres:rpm", "postgres")):
        spec = PipelineSpec("requests-per-minute", topic, sink, bootstrap, os.path.join(out_dir, f"ck-{name}"),
                            trigger_seconds=0.5, available_now=available_now,
                            # small batches until the kill; after the restart the rest in one
                            max_offsets_per_trigger=None if available_now else 1500,
                            pg_dsn=dsn, query_name=f"rpm-{name}")
        queries.append(start(spark, spec))
    print("STARTED", flush=True)
    for q in queries:
        q.awaitTermination()
        if q.exception() is not None:
            raise SystemExit(f"query failed: {q.exception()}")


if __name__ == "__main__":
    main()
