"""Click-through join throughput: --searches searches (1,000,000) and their clicks (--click-rate 0.1: about
100,000) through the broker, joined within one hour (left outer, watermarks on both sides) and counted
per query per hour, with Spark on this machine. Reports events/s and the rows held in the join's state
after each microbatch (it must stay bounded once the watermark moves). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time

from confluent_kafka.admin import AdminClient, NewTopic

from freshet.client.produce import produce_records
from freshet.gen.search_clicks import ClickEvent, SearchEvent, search_clicks
from freshet.local import BrokerProcess


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--searches", type=int, default=1_000_000)
    ap.add_argument("--click-rate", type=float, default=0.1)
    ap.add_argument("--per-batch", type=int, default=200_000)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="freshet-joins-")
    with BrokerProcess() as broker:
        from freshet.pipelines import joins
        from freshet.spark import session

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for name in ("searches", "clicks"):
            # events are dated 2026-01-01: keep them whatever their age
            admin.create_topics([NewTopic(name, 4, config={"retention.ms": "-1"})])[name].result(10)
        events = list(search_clicks(args.searches, seed=1, every_ms=100, click_rate=args.click_rate))
        searches = [e for e in events if isinstance(e, SearchEvent)]
        clicks = sorted((e for e in events if isinstance(e, ClickEvent)), key=lambda c: c.ts_ms)
        produce_records(broker.bootstrap, "searches", ((e.user.encode(), e.value(), e.ts_ms) for e in searches))
        produce_records(broker.bootstrap, "clicks", ((e.user.encode(), e.value(), e.ts_ms) for e in clicks))
        del events
        spark = session("joins-bench", shuffle_partitions=4,
                        extra={"spark.sql.streaming.numRecentProgressUpdates": "1000"})

        def stream(topic, share):
            return (spark.readStream.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
                    .option("subscribe", topic).option("startingOffsets", "earliest")
                    .option("maxOffsetsPerTrigger", int(args.per_batch * share)).load())

        share = len(clicks) / len(searches)
        result = joins.click_through(joins.parse_json(stream("searches", 1.0), joins.SEARCH_SCHEMA, "search_time"),
                                     joins.parse_json(stream("clicks", share), joins.CLICK_SCHEMA, "click_time"))
        start = time.perf_counter()
        query = (result.writeStream.outputMode("append").format("noop")
                 .option("checkpointLocation", os.path.join(work, "ck")).trigger(availableNow=True).start())
        query.awaitTermination()
        elapsed = time.perf_counter() - start
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        rows = sum(p["numInputRows"] for p in progress)
        state = [sum(op["numRowsTotal"] for op in p["stateOperators"]) for p in progress]
        print(json.dumps({"result": "click_through_join", "searches": len(searches), "clicks": len(clicks),
                          "events_per_s": round(rows / elapsed), "seconds": round(elapsed, 1),
                          "batches": len(progress), "state_rows_per_batch": state,
                          "machine": f"{platform.machine()} {os.cpu_count()} cores",
                          "date": time.strftime("%Y-%m-%d")}), flush=True)
        spark.stop()
        del admin
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
