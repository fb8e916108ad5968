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

``--live``: the same question while the persistent query writing the table runs under load, asked as users ask
it. A broker of its own; ``--keys`` records (one per key) into a 2-partition stream, then ``CREATE TABLE kt AS
SELECT k, count(*) AS n, sum(v) AS total FROM ev GROUP BY k`` in a local Spark (its copy SQLite, the default);
once the copy holds every key, a producer writes ``--rate`` records/s of random keys (the query upserts each
microbatch's changed rows into the copy, in this process, as the dashboard's Spark does) while pull queries
``SELECT * FROM kt WHERE k = ...`` are timed two ways: ``SqlSession.execute_one`` (``freshet sql``) in this
process, then ``POST /sql`` on the dashboard's SQL route served by uvicorn in this process, asked from a client
process of its own through one keep-alive HTTP connection. Prints one JSON object: per way p50/p90/p99/max ms, the
microbatches the query wrote meanwhile and the load average.

``--http-trees OLD_SRC NEW_SRC``: ``POST /sql``'s pull queries served by two source trees (each a ``src`` directory,
e.g. one ``git archive`` of an older commit), alternated request by request from this process, in ``--rounds``
rounds of ``--queries`` each per tree, over a SQLite copy of ``--keys`` rows both read. Each server is a process of
its own (the route served by uvicorn, as ``--live`` serves it); with ``--writes``, each server also upserts that many
rows/s of random keys into its copy from a thread, as the persistent query's sink does in the dashboard's process
(the GIL shared with it). Prints per tree the median and the spread (min-max) over the rounds of p50, p99 and the
server's CPU per request (its utime + stime, the writer's included), with the load average.

``--compare``: each query alternated with the same one through the general path (the statement parsed, the pull
query read by sqlglot; over HTTP, the route's lines from a thread of the request's own), the baseline of the fast
path, in the same run.
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

from freshet.sql.http import SqlEndpoint, lines
from freshet.sql.parser import parse, parse_one
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
    parser.add_argument("--live", action="store_true", help="pull queries while the persistent query writes the "
                                                             "table under load, direct and over HTTP")
    parser.add_argument("--rate", type=int, default=2_000, help="--live: records/s into the query's stream")
    parser.add_argument("--compare", action="store_true", help="alternate each query with the same one answered "
                                                                "through the general path (parsed with sqlglot)")
    parser.add_argument("--http-trees", nargs=2, metavar=("OLD_SRC", "NEW_SRC"),
                        help="POST /sql pull queries served by two source trees, alternated (before/after)")
    parser.add_argument("--rounds", type=int, default=5, help="--http-trees: rounds of --queries per tree")
    parser.add_argument("--writes", type=int, default=2_000, help="--http-trees: rows/s each server upserts into "
                                                                   "its copy meanwhile (0: none)")
    parser.add_argument("--serve", nargs=3, metavar=("DATA_DIR", "PORT_FILE", "RATE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    if args.http_trees:
        trees(args)
        return
    if args.live:
        live(args)
        return
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
        ways = ["fast"] + (["general"] if args.compare else [])
        latencies: dict[str, list[float]] = {way: [] for way in ways}
        cpu_ms: dict[str, list[float]] = {way: [] for way in ways}
        found = 0
        for n in range(len(ways) * (args.queries + 200)):
            way = ways[n % len(ways)]
            i = rng.randrange(args.keys * 10 // 9)  # about 10 % of the keys asked for are not there
            minute, url = key(i)
            statement = f"SELECT * FROM rpm WHERE minute = '{minute.isoformat(sep=' ')}' AND url = '{url}'"
            began, cpu = time.perf_counter(), time.thread_time()
            answer = session.execute_one(statement) if way == "fast" else general(session, statement)
            spent, cpu_spent = time.perf_counter() - began, time.thread_time() - cpu
            if n >= 200 * len(ways):
                latencies[way].append(spent * 1000)
                cpu_ms[way].append(cpu_spent * 1000)
                found += bool(answer.rows)
            assert bool(answer.rows) == (i < args.keys), statement

        def at(values: list[float], q: float) -> float:
            values = sorted(values)
            return round(values[min(len(values) - 1, int(q * len(values)))], 3)

        figures = {}
        for way in ways:
            spent = latencies[way]
            figures[way] = {"p50_ms": at(spent, 0.50), "p90_ms": at(spent, 0.90), "p99_ms": at(spent, 0.99),
                            "max_ms": round(max(spent), 3), "mean_ms": round(statistics.fmean(spent), 3),
                            "cpu_p50_ms": at(cpu_ms[way], 0.50), "cpu_p99_ms": at(cpu_ms[way], 0.99)}
        print(json.dumps({"store": "postgresql" if args.pg_dsn else "sqlite", "rows": store.count("rpm"),
                          "fill_s": round(fill_s, 2), "queries": len(latencies["fast"]), "found": found,
                          **(figures["fast"] if not args.compare else figures), "load_avg": os.getloadavg(),
                          "python": sys.version.split()[0]}))


def general(session, statement: str):
    """The answer through the general path (the statement parsed, then sqlglot's reading of the pull query): what
    ``execute_one`` ran before the fast path, the baseline of ``--compare``."""
    return session.run(parse_one(statement))


class GeneralSession(SqlSession):
    def execute(self, script):
        for statement in parse(script):
            yield self.run(statement)


class GeneralEndpoint(SqlEndpoint):
    """``POST /sql`` through the general path: each request's lines from a thread of its own."""

    def answer_now(self, text: str, properties: dict | None = None):
        return None

    def __call__(self, text: str, properties: dict | None = None):
        session = GeneralSession(self.bootstrap, spark_factory=self.spark, data_dir=self.data_dir)
        return lines(session, text, properties or {}), session.close


def percentiles(latencies: list[float]) -> dict:
    latencies = sorted(latencies)

    def at(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3)

    return {"queries": len(latencies), "p50_ms": at(0.50), "p90_ms": at(0.90), "p99_ms": at(0.99),
            "max_ms": round(latencies[-1], 3), "mean_ms": round(statistics.fmean(latencies), 3)}


def http_client(port: int, keys: int, queries: int, ways: list[str], answers) -> None:
    """``queries`` pull queries per way through ``POST /sql`` (``http``; ``http_general``: the route of the general
    path), alternating, through one keep-alive connection, from a process of its own as a user's client is; the
    timings (ms, after 100 per way to warm up) and how many found their row into ``answers``."""
    import httpx

    rng = random.Random(11)
    timings: dict[str, list[float]] = {way: [] for way in ways}
    found = 0
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        for n in range(len(ways) * (queries + 100)):
            way = ways[n % len(ways)]
            statement = f"SELECT * FROM kt WHERE k = {rng.randrange(keys)}"
            began = time.perf_counter()
            answer = client.post("/sql" if way == "http" else "/general/sql", json={"sql": statement})
            answer.raise_for_status()
            rows = [json.loads(line) for line in answer.text.splitlines()[1:]]
            spent = (time.perf_counter() - began) * 1000
            if n >= 100 * len(ways):
                timings[way].append(spent)
                found += len(rows) == 1
    answers.put((timings, found))


def produce(bootstrap: str, rate: int, keys: int, stop) -> None:
    """``rate`` records/s of random keys into the live query's stream until ``stop`` is set."""
    from confluent_kafka import Producer

    writer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    while not stop.is_set():
        second = time.monotonic()
        for _ in range(rate):
            writer.produce("pull-bench-ev", json.dumps({"k": random.randrange(keys), "v": 1}).encode())
            writer.poll(0)
        stop.wait(max(0.0, 1 - (time.monotonic() - second)))
    writer.flush(30)


def live(args) -> None:
    import multiprocessing
    import signal
    import socket
    import threading

    import uvicorn
    from confluent_kafka import Producer
    from fastapi import FastAPI

    from freshet.dashboard.routers import sql as sql_route
    from freshet.local import BrokerProcess
    from freshet.spark import session as spark_session
    rng = random.Random(7)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the broker and Spark stopped on the way out
    with tempfile.TemporaryDirectory() as data, BrokerProcess() as broker:
        bootstrap = broker.bootstrap
        spark = spark_session("sql-pull-bench", shuffle_partitions=2)
        sql = SqlSession(bootstrap, spark, data_dir=data)
        list(sql.execute("CREATE STREAM ev (k BIGINT, v BIGINT) WITH (topic='pull-bench-ev', format='json', "
                         "partitions=2)"))
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        for k in range(args.keys):
            producer.produce("pull-bench-ev", json.dumps({"k": k, "v": 1}).encode())
            if k % 10_000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        (created,) = sql.execute("CREATE TABLE kt AS SELECT k, count(*) AS n, sum(v) AS total FROM ev GROUP BY k")
        query = spark.streams.active[0]
        store = store_for(sql)
        began = time.monotonic()
        while store.count("kt") < args.keys:
            time.sleep(1)
            if not query.isActive:
                raise SystemExit(f"the query failed: {query.exception()}")
        fill_s = time.monotonic() - began

        stop = multiprocessing.Event()  # the load comes from a process of its own: no share of this one's GIL

        app = FastAPI()
        app.include_router(sql_route.router)
        app.state.sql = SqlEndpoint(bootstrap, data_dir=data)  # pull queries reach no Spark
        general_app = FastAPI()  # the same route answering through the general path (the baseline)
        general_app.include_router(sql_route.router)
        general_app.state.sql = GeneralEndpoint(bootstrap, data_dir=data)
        app.mount("/general", general_app)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        feeder = multiprocessing.Process(target=produce, args=(bootstrap, args.rate, args.keys, stop), daemon=True)
        feeder.start()
        batch_before = (query.lastProgress or {}).get("batchId", 0)
        # direct (freshet sql's SqlSession, in this process), then POST /sql from a client process of its own
        ways = ["direct"] + (["direct_general"] if args.compare else [])
        timings: dict[str, list[float]] = {way: [] for way in ways}
        found = 0
        for n in range(len(ways) * (args.queries + 100)):
            way = ways[n % len(ways)]
            statement = f"SELECT * FROM kt WHERE k = {rng.randrange(args.keys)}"
            began = time.perf_counter()
            rows = (sql.execute_one(statement) if way == "direct" else general(sql, statement)).rows
            spent = (time.perf_counter() - began) * 1000
            if n >= 100 * len(ways):
                timings[way].append(spent)
                found += len(rows) == 1
        http_ways = ["http"] + (["http_general"] if args.compare else [])
        answers = multiprocessing.get_context("spawn").Queue()
        asking = multiprocessing.get_context("spawn").Process(
            target=http_client, args=(port, args.keys, args.queries, http_ways, answers))
        asking.start()
        http_timings, http_found = answers.get(timeout=3600)
        asking.join()
        timings.update(http_timings)
        found += http_found
        stop.set()
        feeder.join()
        batches = (query.lastProgress or {}).get("batchId", 0) - batch_before
        server.should_exit = True
        list(sql.execute(f"TERMINATE {created.text.split()[4].rstrip(':')}"))
        print(json.dumps({"keys": args.keys, "rate": args.rate, "fill_s": round(fill_s, 1), "found": found,
                          **{way: percentiles(spent) for way, spent in timings.items()},
                          "microbatches_meanwhile": batches, "load_avg": os.getloadavg(),
                          "python": sys.version.split()[0]}))
        spark.stop()


def serve(data_dir: str, port_file: str, rate: str) -> None:
    """The dashboard's SQL route over the copy in ``data_dir``, served by uvicorn on a free port (written to
    ``port_file``), and ``rate`` rows/s upserted into the copy meanwhile; run with PYTHONPATH naming the source tree
    to serve (``--http-trees``)."""
    import socket
    import threading

    import uvicorn
    from fastapi import FastAPI

    from freshet.dashboard.routers import sql as sql_route

    app = FastAPI()
    app.include_router(sql_route.router)
    app.state.sql = SqlEndpoint("127.0.0.1:9", data_dir=data_dir)  # a pull query reaches no broker, no Spark
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))

    def announce() -> None:
        while not server.started:
            time.sleep(0.05)
        with open(port_file + ".tmp", "w") as f:
            f.write(str(port))
        os.replace(port_file + ".tmp", port_file)

    def write() -> None:  # what the sink does with each microbatch's changed rows, once a second
        from types import SimpleNamespace

        store, rng = store_for(SimpleNamespace(data_dir=data_dir)), random.Random(9)
        keys = store.count("kt")
        while int(rate):
            second = time.monotonic()
            store.upsert("kt", [(rng.randrange(keys), rng.randrange(100), rng.randrange(1000))
                                for _ in range(int(rate))])
            time.sleep(max(0.0, 1 - (time.monotonic() - second)))

    threading.Thread(target=announce, daemon=True).start()
    threading.Thread(target=write, daemon=True).start()
    server.run()


def _cpu_s(pid: int) -> float:
    """A process's CPU time so far (utime + stime), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def trees(args) -> None:
    import subprocess

    import httpx

    rng = random.Random(5)
    with tempfile.TemporaryDirectory() as data:
        from types import SimpleNamespace

        names = ["old", "new"]
        for name in names:  # a copy each: their writers do not wait on each other's locks
            store = store_for(SimpleNamespace(data_dir=os.path.join(data, name)))
            store.define("kt", [("k", "bigint"), ("n", "bigint"), ("total", "bigint")], ["k"])
            for start in range(0, args.keys, 5_000):
                store.upsert("kt", [(k, rng.randrange(100), rng.randrange(1000))
                                    for k in range(start, min(args.keys, start + 5_000))])
            store.close()
        servers, ports = [], []
        try:
            for name, src in zip(names, args.http_trees):
                port_file = os.path.join(data, f"{name}.port")
                env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
                servers.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve",
                                                 os.path.join(data, name), port_file, str(args.writes)], env=env))
                while not os.path.exists(port_file):
                    if servers[-1].poll() is not None:
                        raise SystemExit(f"the {name} server exited")
                    time.sleep(0.1)
                with open(port_file) as f:
                    ports.append(int(f.read()))
            clients = [httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) for port in ports]
            rounds: dict[str, list[dict]] = {name: [] for name in names}
            for round_ in range(args.rounds + 1):  # the first round warms up
                timings: dict[str, list[float]] = {name: [] for name in names}
                cpu = [_cpu_s(s.pid) for s in servers]
                for n in range(2 * args.queries):
                    which = n % 2
                    statement = f"SELECT * FROM kt WHERE k = {rng.randrange(args.keys)}"
                    began = time.perf_counter()
                    answer = clients[which].post("/sql", json={"sql": statement})
                    spent = (time.perf_counter() - began) * 1000
                    assert answer.status_code == 200 and len(answer.text.splitlines()) == 2, answer.text
                    timings[names[which]].append(spent)
                cpu = [_cpu_s(s.pid) - before for s, before in zip(servers, cpu)]
                if round_ == 0:
                    continue
                for which, name in enumerate(names):
                    figures = percentiles(timings[name])
                    rounds[name].append({"p50_ms": figures["p50_ms"], "p99_ms": figures["p99_ms"],
                                         "cpu_ms_per_request": round(cpu[which] * 1000 / args.queries, 3)})
            for client in clients:
                client.close()
        finally:
            for server in servers:
                server.terminate()
                server.wait(30)

    def summary(values: list[float]) -> dict:
        return {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)}

    print(json.dumps({"keys": args.keys, "rounds": args.rounds, "queries_per_round": args.queries,
                      "writes_per_s": args.writes,
                      **{name: {what: summary([r[what] for r in rounds[name]])
                                for what in ("p50_ms", "p99_ms", "cpu_ms_per_request")} for name in names},
                      "load_avg": os.getloadavg(), "python": sys.version.split()[0]}))


if __name__ == "__main__":
    main()
