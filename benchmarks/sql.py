"""freshet sql against the same Python pipeline (issue 48): requests per minute over the same access-log lines,
once as ``freshet.pipelines.access_logs.requests_per_minute`` (what ``freshet run requests-per-minute`` runs) and
once as the SQL query over a stream declared with the same regular expression, both through the freshet source,
both into Spark's noop sink with an availableNow trigger (read everything there is, in one microbatch, then stop).
Target: the SQL query's throughput at least 0.95x the pipeline's (the plan should be the same).

``--lines`` lines into a 2-partition topic of a broker of its own; ``--rounds`` alternating turns (pipeline, SQL,
pipeline, ...), each with a fresh checkpoint, after one turn of each to warm up the JVM and the Python workers.
Prints one JSON object: per side the median seconds and rows/s, and the ratio of the medians (SQL / pipeline
throughput), with the machine's load average.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
import time

from confluent_kafka import Producer

from freshet.gen.access_logs import AccessLogGenerator
from freshet.local import BrokerProcess
from freshet.pipelines import access_logs as al
from freshet.pipelines.runner import PipelineSpec, source
from freshet.spark import session
from freshet.sql.session import SqlSession
from freshet.testing.topics import create_topic

TOPIC = "sql-bench-access"
FIELDS = [("client_ip", "{g1}"), ("event_time", f"to_timestamp({{g2}}, '{al.TIME_FORMAT}')"),
          ("status", "CAST({g5} AS INT)"), ("size", "CAST(CASE WHEN {g6} = '-' THEN '0' ELSE {g6} END AS BIGINT)")]
SELECT = ("SELECT window.start AS window_start, window.end AS window_end, count(1) AS requests, sum(size) AS bytes, "
          "sum(CASE WHEN status >= 500 THEN 1 ELSE 0 END) AS server_errors FROM access "
          "WHERE client_ip <> '' AND event_time IS NOT NULL GROUP BY window(event_time, '1 minute')")


def declare(lateness: str) -> str:
    """The stream: the line, and the pipeline's fields computed by its own regular expression."""
    groups = {f"g{i}": f"regexp_extract(line, r'{al.COMBINED}', {i})" for i in (1, 2, 5, 6)}
    computed = ",\n  ".join(f"{name} AS {expr.format(**groups)}" for name, expr in FIELDS)
    return (f"CREATE OR REPLACE STREAM access (\n  line STRING,\n  {computed}\n) WITH (topic='{TOPIC}', format='raw', "
            f"timestamp='event_time', watermark='{lateness}')")


def fill(bootstrap: str, lines: int) -> None:
    create_topic(bootstrap, TOPIC, 2, {"retention.ms": "-1", "retention.bytes": "-1"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000})
    gen = AccessLogGenerator(seed=7, users=500, rate_per_s=200)
    for event in itertools.islice(gen.events(), lines):
        producer.produce(TOPIC, event.line.encode())
        producer.poll(0)
    assert producer.flush(60) == 0


def run_once(df, checkpoint: str) -> tuple[float, int]:
    """Seconds from start to the end of an availableNow query of ``df`` into the noop sink, and rows read."""
    began = time.monotonic()
    query = (df.writeStream.format("noop").outputMode("update").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    spent = time.monotonic() - began
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    return spent, sum(int(p.get("numInputRows", 0)) for p in query.recentProgress)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    lateness = "2 minutes"
    with tempfile.TemporaryDirectory() as data, BrokerProcess(data_dir=os.path.join(data, "broker")) as broker:
        fill(broker.bootstrap, args.lines)
        spark = session("freshet-sql-bench", shuffle_partitions=2)
        sql = SqlSession(broker.bootstrap, spark, data_dir=data)
        list(sql.execute(declare(lateness)))
        spec = PipelineSpec("requests-per-minute", TOPIC, "console", broker.bootstrap, "")

        sides = {"pipeline": lambda: al.requests_per_minute(al.parse(source(spark, spec)), lateness=lateness),
                 "sql": lambda: sql.dataframe(SELECT)}
        times: dict[str, list[float]] = {"pipeline": [], "sql": []}
        rows = {}
        for turn in range(args.rounds + 1):
            for side, make in sides.items():
                spent, rows[side] = run_once(make(), os.path.join(data, f"ck-{side}-{turn}"))
                if turn:  # the first turn of each warms up
                    times[side].append(spent)
        out = {"lines": args.lines, "rounds": args.rounds}
        for side in sides:
            median = statistics.median(times[side])
            out[side] = {"median_s": round(median, 2), "rows_per_s": round(rows[side] / median),
                         "rows": rows[side], "runs_s": [round(t, 2) for t in times[side]]}
        out["sql_vs_pipeline"] = round(out["sql"]["rows_per_s"] / out["pipeline"]["rows_per_s"], 3)
        out["load_avg"] = os.getloadavg()
        print(json.dumps(out))
        sql.close()
        spark.stop()


if __name__ == "__main__":
    main()
