"""CDC throughput and latency, the connector in its own process, PostgreSQL and the broker local.

(1) live: 20,000 single-row UPDATE transactions commit while the connector runs; latency is the
    change record's timestamp (when the connector handed it to the producer) minus the commit time
    (source.ts_ms), p50/p99. The connector then makes it durable (acks=all flush) within
    flush_every_ms (100 ms) or 5,000 events, before acknowledging the LSN.
(2) throughput: --updates (200,000) such transactions commit while the connector is down; on restart
    it catches up; changes/s from the first to the last change record.
Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time

import psycopg2
from confluent_kafka import Consumer, TopicPartition

from freshet.client import consumer_config
from freshet.local import BrokerProcess, PostgresServer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--updates", type=int, default=200_000)
    args = ap.parse_args()
    with PostgresServer() as pg, BrokerProcess() as broker:
        conn = psycopg2.connect(pg.dsn)
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute("CREATE TABLE counters (id int PRIMARY KEY, n bigint, label text)")
        cur.execute("INSERT INTO counters SELECT g, 0, 'counter ' || g FROM generate_series(1, 1000) g")
        connector = subprocess.Popen([sys.executable, "-m", "freshet.cli.main", "cdc", "postgres", "--dsn", pg.dsn,
                                      "--tables", "public.counters", "--topic-prefix", "bench",
                                      "--bootstrap", broker.bootstrap], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        topic = "bench.public.counters"
        consumer = Consumer(consumer_config(broker.bootstrap, overrides={"log_level": 0}))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the snapshot is in: 1000 rows
            try:
                if consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1] >= 1000:
                    break
            except Exception:  # the connector has not created the topic yet
                pass
            time.sleep(0.2)
        def start_connector():
            return subprocess.Popen([sys.executable, "-m", "freshet.cli.main", "cdc", "postgres", "--dsn", pg.dsn,
                                     "--tables", "public.counters", "--topic-prefix", "bench",
                                     "--bootstrap", broker.bootstrap], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)

        def update(n):
            cur.execute(f"""DO $$ BEGIN FOR i IN 1..{n} LOOP
                              UPDATE counters SET n = n + 1 WHERE id = 1 + (i % 1000); COMMIT;
                            END LOOP; END $$""")

        def collect(start_offset, n):
            c = Consumer(consumer_config(broker.bootstrap, overrides={"log_level": 0}))
            c.assign([TopicPartition(topic, 0, start_offset)])
            latencies, stamps = [], []
            limit = time.monotonic() + 900
            while len(stamps) < n and time.monotonic() < limit:
                for m in c.consume(10000, 1.0):
                    if m.error() is None and m.value() is not None:
                        produced_ms = m.timestamp()[1]
                        latencies.append(produced_ms - json.loads(m.value())["source"]["ts_ms"])
                        stamps.append(produced_ms)
            c.close()
            latencies.sort()
            return latencies, stamps

        # (1) live: the connector runs while 20,000 transactions commit; commit -> topic latency
        live_n = min(20_000, args.updates)
        update(live_n)
        latencies, _ = collect(1000, live_n)
        # (2) throughput: the connector is down while --updates transactions commit, then catches up
        connector.send_signal(signal.SIGTERM)
        connector.wait(30)
        backlog_start = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        update(args.updates)
        connector = start_connector()
        _, stamps = collect(backlog_start, args.updates)
        connector.send_signal(signal.SIGTERM)
        connector.wait(30)
        consumer.close()
        seconds = (max(stamps) - min(stamps)) / 1000
        print(json.dumps({
            "result": "cdc", "updates": args.updates, "captured": len(stamps),
            "changes_per_s": round(len(stamps) / max(seconds, 1e-3)), "catch_up_seconds": round(seconds, 1),
            "live_transactions": live_n, "commit_to_topic_p50_ms": latencies[len(latencies) // 2],
            "commit_to_topic_p99_ms": latencies[int(len(latencies) * 0.99)],
            "machine": f"{platform.machine()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
        }), flush=True)


if __name__ == "__main__":
    main()
