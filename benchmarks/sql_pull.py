"""freshet sql's pull queries (issue 48): the latency of ``SELECT * FROM t WHERE key = ...`` over a table of
``--keys`` rows in its queryable copy, through ``SqlSession.execute_one`` (the statement parsed, recognised as a
pull query, answered from the copy: what ``freshet sql -e`` and ``POST /sql`` run), target p99 <= 10 ms.

The table: a per-minute-and-URL count, as ``CREATE TABLE ... AS SELECT ... GROUP BY window(...), url`` keeps it:
a timestamp and a string key, three values. Its rows go in through ``TableStore.upsert`` in batches of 5,000
(what the persistent query's sink does with each microbatch). Each query asks for a random key (present, or
absent for 10 %). The copy: SQLite in a temporary data dir (the default), or PostgreSQL with ``--pg-dsn``.

Prints one JSON object: rows, fill time, and the latency p50/p90/p99/max in ms over ``--queries`` queries (after
200 to warm up), the CPU time a query takes (p50/p99: steadier than wall-clock on a shared machine, whose
scheduler alone can delay a query by several ms), with the machine's load average.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import sys
import tempfile
import time

from freshet.sql.session import SqlSession
from freshet.sql.table_store import store_for

T0 = datetime.datetime(2026, 1, 1)
URLS = 100


def key(i: int) -> tuple[datetime.datetime, str]:
    return T0 + datetime.timedelta(minutes=i // URLS), f"/page/{i % URLS}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=5_000)
    parser.add_argument("--pg-dsn", default=None, help="keep the copy in PostgreSQL (default: SQLite)")
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as data:
        session = SqlSession("127.0.0.1:9", data_dir=data)  # a pull query never reaches the broker
        if args.pg_dsn:
            session.table_store_dsn = args.pg_dsn
        store = store_for(session)
        store.define("rpm", [("minute", "timestamp"), ("url", "string"), ("requests", "bigint"),
                             ("bytes", "bigint"), ("avg_size", "double")], ["minute", "url"])
        began = time.monotonic()
        for start in range(0, args.keys, 5_000):
            store.upsert("rpm", [(*key(i), rng.randrange(1000), rng.randrange(10**6), rng.random() * 1000)
                                 for i in range(start, min(args.keys, start + 5_000))])
        fill_s = time.monotonic() - began
        latencies, cpu_ms, found = [], [], 0
        for n in range(args.queries + 200):
            i = rng.randrange(args.keys * 10 // 9)  # about 10 % of the keys asked for are not there
            minute, url = key(i)
            statement = f"SELECT * FROM rpm WHERE minute = '{minute.isoformat(sep=' ')}' AND url = '{url}'"
            began, cpu = time.perf_counter(), time.thread_time()
            answer = session.execute_one(statement)
            spent, cpu_spent = time.perf_counter() - began, time.thread_time() - cpu
            if n >= 200:
                latencies.append(spent * 1000)
                cpu_ms.append(cpu_spent * 1000)
                found += bool(answer.rows)
            assert bool(answer.rows) == (i < args.keys), statement
        latencies.sort()
        cpu_ms.sort()

        def at(q: float, values: list[float] | None = None) -> float:
            values = latencies if values is None else values
            return round(values[min(len(values) - 1, int(q * len(values)))], 3)

        print(json.dumps({"store": "postgresql" if args.pg_dsn else "sqlite", "rows": store.count("rpm"),
                          "fill_s": round(fill_s, 2), "queries": len(latencies), "found": found,
                          "p50_ms": at(0.50), "p90_ms": at(0.90), "p99_ms": at(0.99), "max_ms": round(latencies[-1], 3),
                          "mean_ms": round(statistics.fmean(latencies), 3),
                          "cpu_p50_ms": at(0.50, cpu_ms), "cpu_p99_ms": at(0.99, cpu_ms), "load_avg": os.getloadavg(),
                          "python": sys.version.split()[0]}))


if __name__ == "__main__":
    main()
