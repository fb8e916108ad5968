"""CEP and stored-query throughput on Spark (issue 23), with the pure-Python matchers as baselines.

Starts a broker (127.0.0.1) and one local Spark session (local[2]). Produces:

- ``--events`` security events from 10,000 source IPs (``freshet gen security-events``: background plus
  planted attacks), and stores the lecture's three intrusion rules;
- ``--listings`` house listings, and ``--queries`` stored searches as people save them on a housing site
  (a city with a kind or a feature or a street, a price band, a minimum of bedrooms), and
  ``--dense-queries`` broad ones (each listing matches about a quarter of them);
- ``--dense-events`` events for the dense rule set (``DENSE_RULES``: eight rules, three quarters of the events
  reaching two to four of them: brute force with SKIP TO NEXT ROW, a distinct-count port scan, an optional
  row, NOT FOLLOWED BY, a Kleene ``R+`` with SUM, ``A X*? B``, a WHERE with two conditions, a flood count),

then for ``--rounds`` rounds, alternating: the ``cep`` pipeline over the events, the ``watch`` pipeline over
the listings (each ``--available-now`` into a topic through the exactly-once sink, on a fresh checkpoint),
and, in this process, the pure-Python matcher (``match_events``) and query index (``QueryIndex.match``)
over the same data; and the same for the dense rules and the broad searches (the rules and watches topics
hold one set at a time, swapped between the runs; the dense rules' alerts on Spark are checked against the
pure-Python matcher's: how many it finds too, how many with the same values). events/s through
Spark = input rows / the microbatches' time (``--max-offsets`` offsets per microbatch; each run's first
batch included), and steady = the same without each run's first batch (which also starts Python workers
and state stores); per Spark CPU second = input rows / the CPU seconds the Spark JVM and its Python
workers spent in the run (the broker's left out), far steadier than the rates per wall second on a shared
machine. The alerts are checked against the planted attacks every round. ``--python-only``: the
pure-Python matchers alone. To compare with another source tree, run this file with ``PYTHONPATH=<tree>/src``.

Prints one JSON object per measurement, then the medians and spreads. Targets: >= 100,000 events/s for the
rules, >= 50,000 for the dense rules, >= 10,000 events/s against 10,000 stored queries and against the
broad ones.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import tempfile
import time

from freshet.cep.matcher import CompiledRule, event_time_ms, match_events
from freshet.cep.rules import parse_rule
from freshet.cep.rulesets import ruleset
from freshet.cep.search import QueryIndex
from freshet.client.produce import produce_records
from freshet.client.stored import RULES_TOPIC, WATCHES_TOPIC, StoredDefinitions
from freshet.gen.listings import CITIES, FEATURES, KINDS, STREETS, listings
from freshet.gen.security_events import security_events
from freshet.local import BrokerProcess
from freshet.pipelines.cep import REFRESH_S
from freshet.testing.topics import create_topic, read_to_end


# ---- the dense rule set (issue 50): most events reach two to four rules ------------------------------

DENSE_RULES = [
    # brute force that gets in: 5+ failed logins then a good one, every start row tried (SKIP TO NEXT ROW)
    """RULE dense_brute_force
    WHERE kind = 'login'
    PARTITION BY user
    MEASURES FIRST(F.user) AS user, COUNT(F.*) AS failures, S.event_time AS got_in
    PATTERN (F{5,} S)
    DEFINE F AS F.status = 'failed', S AS S.status = 'ok'
    WITHIN 2 MINUTES
    AFTER MATCH SKIP TO NEXT ROW""",
    # a source connecting to more than 7 distinct ports within a minute
    """RULE dense_port_scan
    WHERE kind = 'conn'
    PARTITION BY src_ip
    MEASURES FIRST(src_ip) AS src_ip, COUNT(DISTINCT dst_port) AS ports, COUNT(*) AS probes
    PATTERN (S*? T)
    DEFINE T AS COUNT(DISTINCT dst_port) > 7
    WITHIN 1 MINUTE""",
    # a good login, perhaps a second login, then a big payment (an optional row)
    """RULE dense_login_then_pay
    WHERE kind IN ('login', 'payment')
    PARTITION BY user
    MEASURES L.user AS user, P.amount AS amount, COUNT(*) AS rows
    PATTERN (L R? P)
    DEFINE L AS L.kind = 'login' AND L.status = 'ok', R AS R.kind = 'login', P AS P.kind = 'payment' AND P.amount > 500
    WITHIN 10 MINUTES""",
    # a failed login no good login follows within a minute
    """RULE dense_locked_out
    WHERE kind = 'login'
    PARTITION BY user
    MEASURES F.user AS user, F.event_time AS failed_at
    PATTERN (F) NOT FOLLOWED BY S
    DEFINE F AS F.status = 'failed' AND PREV(F.status) = 'failed', S AS S.status = 'ok'
    WITHIN 1 MINUTE""",
    # small payments in a row adding up to a lot (a Kleene R+ with SUM)
    """RULE dense_structuring
    WHERE kind = 'payment'
    PARTITION BY user
    MEASURES FIRST(R.user) AS user, SUM(R.amount) + T.amount AS total, COUNT(*) AS payments
    PATTERN (R+ T)
    DEFINE R AS R.amount < 300, T AS T.amount < 300 AND SUM(R.amount) + T.amount >= 900
    WITHIN 10 MINUTES""",
    # a card used in two countries (A X*? B: relaxed contiguity)
    """RULE dense_two_countries
    WHERE kind = 'payment'
    PARTITION BY user
    MEASURES A.user AS user, A.country AS first_country, B.country AS second_country
    PATTERN (A X*? B)
    DEFINE B AS B.country <> A.country
    WITHIN 5 MINUTES""",
    # every big payment
    """RULE dense_big_payment
    WHERE kind = 'payment' AND amount > 900
    PARTITION BY user
    MEASURES P.user AS user, P.amount AS amount
    PATTERN (P)""",
    # one server hit by 40+ connections within 10 seconds
    """RULE dense_flood
    WHERE kind = 'conn'
    PARTITION BY dst_ip
    MEASURES FIRST(dst_ip) AS dst_ip, COUNT(*) AS connections
    PATTERN (C{40,})
    WITHIN 10 SECONDS""",
]


def dense_events(count: int, seed: int = 11, start_ms: int = 1_767_225_600_000, rate_per_s: float = 2_000.0
                 ) -> list[dict]:
    """Events for DENSE_RULES: 30% logins (3 rules each), 25% connections (2), 20% payments (3-4), 25%
    other events no rule wants; 2,000 users, 1,000 sources, 50 servers; in event-time order."""
    rng = random.Random(seed)
    countries = ["NL", "NL", "NL", "NL", "DE", "BE", "FR"]
    out = []
    for i in range(count):
        when = start_ms + int(i * 1000 / rate_per_s)
        roll = rng.random()
        user = f"u{rng.randrange(2_000)}"
        if roll < 0.30:
            event = {"event_time": when, "kind": "login", "user": user,
                     "status": "failed" if rng.random() < 0.4 else "ok"}
        elif roll < 0.55:
            event = {"event_time": when, "kind": "conn", "src_ip": f"11.0.{rng.randrange(4)}.{rng.randrange(250)}",
                     "dst_ip": f"10.0.0.{rng.randrange(50)}", "dst_port": rng.choice((80, 443, 22, 8080)) if
                     rng.random() < 0.9 else rng.randrange(1, 65_536)}
        elif roll < 0.75:
            event = {"event_time": when, "kind": "payment", "user": user, "amount": rng.randrange(1, 1_000),
                     "country": rng.choice(countries)}
        else:
            event = {"event_time": when, "kind": "pageview", "user": user, "path": f"/p/{rng.randrange(100)}"}
        out.append(event)
    return out


def dense_searches(n: int, seed: int = 7) -> list[str]:
    """Broad stored searches (a price ceiling, a few cities, a feature, a minimum of bedrooms): each listing
    matches about a quarter of them."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        roll = rng.random()
        ceiling = rng.randint(20, 100) * 10_000
        if roll < 0.3:
            out.append(f"price <= {ceiling} AND bedrooms >= {rng.randint(1, 4)}")
        elif roll < 0.55:
            cities = ", ".join(f"'{c}'" for c in rng.sample(CITIES, 4))
            out.append(f"city IN ({cities}) AND price <= {ceiling + 300_000}")
        elif roll < 0.8:
            out.append(f"\"{rng.choice(FEATURES)}\" AND bedrooms >= {rng.randint(1, 4)}")
        else:
            out.append(f"kind = '{rng.choice(KINDS)}' OR (\"{rng.choice(FEATURES)}\" AND price <= {ceiling})")
    return out


def saved_searches(n: int, seed: int = 5) -> list[str]:
    """What people save on a housing site: a city, a kind or a feature, a price band, a minimum of bedrooms."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        city, roll = rng.choice(CITIES), rng.random()
        low = rng.randint(15, 100) * 10_000
        band = f"price >= {low} AND price <= {low + rng.choice([50_000, 100_000, 150_000])}"
        if roll < 0.5:
            out.append(f"city = '{city}' AND kind = '{rng.choice(KINDS)}' AND {band} "
                       f"AND bedrooms >= {rng.randint(1, 4)}")
        elif roll < 0.75:
            out.append(f"city = '{city}' AND \"{rng.choice(FEATURES)}\" AND {band}")
        elif roll < 0.9:
            out.append(f"street:\"{rng.choice(STREETS)}\" AND city = '{city}' AND {band}")
        else:
            a, b = rng.sample(FEATURES, 2)
            out.append(f'"{a}" AND "{b}" AND city = \'{city}\' AND {band}')
    return out


class TreeCpu:
    """CPU seconds of ``root``'s descendants (the Spark JVM and its Python workers) but ``leave_out`` (the
    broker) and its own, over a run, and of those the Python processes'; /proc sampled every ``every`` s.

    A process's CPU is its own time (utime + stime); one that exits hands its total to its parent's reaped
    time (cutime + cstime). A difference of two samples of the tree (what this benchmark did before) lost
    the CPU of a process that had been running at the first sample and ended without a parent in the tree to
    reap it, and put the CPU of the Python workers the JVM reaped in the JVM's column. Here each process is
    followed by (pid, start time) from its first sample to its last: its own time since the run began (all
    of it for one born during the run), plus, each interval, the increase of a process's reaped time less
    what its vanished children had at their last sample: the CPU of children that lived and ended between
    two samples, and of the others' last moments. That remainder counts as Python's unless the children
    that vanished in the interval were none of them Python (the tree forks nothing else but the JVM)."""

    def __init__(self, root: int, leave_out: int | None = None, every: float = 0.25) -> None:
        import threading

        self.root, self.leave_out, self.every = root, leave_out, every
        self.ticks = os.sysconf("SC_CLK_TCK")
        # (pid, start time) of processes not in the tree: a pid alone is reused (pid_max 32768 wraps in minutes on a
        # busy machine), and a Python worker with a pid once another's was left out, its CPU with it
        self.outside: set[tuple[int, int]] = set()
        # pid -> [start, python, ppid, own counted from, own, reaped] of the processes in the tree
        self.seen: dict[int, list] = {}
        self.total = self.python = 0  # ticks
        self.threads: dict[tuple[int, int], list] = {}  # (java pid, tid) -> [kind, ticks counted from, ticks]
        self._stop = threading.Event()
        self.samples = 0  # taken by the polling thread
        self._sample(first=True)
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    @staticmethod
    def _stat(pid: int) -> tuple[str, int, int, int, int] | None:
        """(name, ppid, start, own ticks, reaped children's ticks) of a process, None if gone."""
        try:
            with open(f"/proc/{pid}/stat") as f:
                name, rest = f.read().split(" (", 1)[1].rsplit(")", 1)
        except (OSError, IndexError, ValueError):
            return None
        fields = rest.split()  # state ppid ... utime(11) stime cutime cstime ... starttime(19)
        return (name, int(fields[1]), int(fields[19]), int(fields[11]) + int(fields[12]),
                int(fields[13]) + int(fields[14]))

    def _count(self, ticks: int, python: bool) -> None:
        self.total += ticks
        if python:
            self.python += ticks

    def _sample(self, first: bool = False) -> None:
        now: dict[int, tuple] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                stat = self._stat(int(entry))
                if stat is not None and (int(entry), stat[2]) not in self.outside:
                    now[int(entry)] = stat
        in_tree = {self.root}
        for pid in sorted(now, key=lambda p: (now[p][2], p)):  # parents before their children
            name, ppid, start, own, reaped = now[pid]
            known = self.seen.get(pid)
            if known is not None and known[0] == start:
                in_tree.add(pid)
            elif pid != self.leave_out and ppid in in_tree:
                in_tree.add(pid)
                # born during the run: all its time and all it reaped are the run's
                self.seen[pid] = [start, name.startswith("python"), ppid, own if first else 0, own,
                                  reaped if first else 0]
            elif pid != self.root:
                self.outside.add((pid, start))
        for pid, known in self.seen.items():
            if pid in now and now[pid][0] == "java":
                self._sample_threads(pid, first)
        if first:
            return
        vanished: dict[int, list] = {}
        for pid, known in list(self.seen.items()):
            if pid not in now or now[pid][2] != known[0]:
                self._count(known[4] - known[3], known[1])
                vanished.setdefault(known[2], []).append(known)
                del self.seen[pid]
        for pid, known in self.seen.items():
            _, ppid, _, own, reaped = now[pid]
            gone = vanished.get(pid, [])
            self._count(reaped - known[5] - sum(g[4] + g[5] for g in gone), not gone or any(g[1] for g in gone))
            known[2], known[4], known[5] = ppid, own, reaped

    # a task thread is "Executor task launch worker ..." while it runs a task, "Executor task i..." between tasks
    JVM_THREADS = (("C1 CompilerThre", "jit"), ("C2 CompilerThre", "jit"), ("GC Thread", "gc"), ("G1 ", "gc"),
                   ("VM Thread", "gc"), ("Executor task", "tasks"), ("stream executio", "stream thread"))

    @classmethod
    def thread_kind(cls, name: str) -> str:
        """The kind of a JVM thread by its name as /proc gives it (15 characters): one of JVM_THREADS', or
        ``other: `` and the name without its digits ("rocksdb:low", "Thread", "shuffle-client")."""
        kind = next((k for prefix, k in cls.JVM_THREADS if name.startswith(prefix)), None)
        return kind or "other: " + re.sub(r"[0-9]+", "", name).strip(" -#")

    def _sample_threads(self, pid: int, first: bool) -> None:
        """The JVM's CPU by thread: JIT compilers, GC, Spark's task threads, the query's stream thread, the rest."""
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    name, rest = f.read().split(" (", 1)[1].rsplit(")", 1)
            except (OSError, IndexError, ValueError):
                continue
            fields = rest.split()
            ticks = int(fields[11]) + int(fields[12])
            known = self.threads.get((pid, int(tid)))
            if known is None:
                self.threads[(pid, int(tid))] = [self.thread_kind(name), ticks if first else 0, ticks]
            else:
                known[2] = ticks

    def jvm_threads(self) -> dict[str, float]:
        """CPU seconds of the JVM's threads by kind since the start (a thread's last 0.25 s before it ended left
        out); ``other`` is the sum of the rest, and each of the rest that took 0.1 s or more is given by name."""
        out: dict[str, float] = {}
        for kind, began, ticks in self.threads.values():
            out[kind] = out.get(kind, 0) + (ticks - began) / self.ticks
        out["other"] = sum(s for kind, s in out.items() if kind.startswith("other: "))
        return {kind: round(s, 2) for kind, s in sorted(out.items()) if not kind.startswith("other: ") or s >= 0.1}

    def _poll(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()
            self.samples += 1

    def stop(self) -> tuple[float, float]:
        """(CPU seconds of the tree since the start, of which the Python processes')."""
        self._stop.set()
        self._thread.join()
        self._sample()
        total, python = self.total, self.python
        for known in self.seen.values():
            total += known[4] - known[3]
            python += known[4] - known[3] if known[1] else 0
        return total / self.ticks, python / self.ticks


def run_pipeline(spark, pipeline: str, topic: str, bootstrap: str, workdir: str, round_no: int,
                 max_offsets: int = 200_000, broker_pid: int | None = None) -> dict:
    from freshet.pipelines.runner import PipelineSpec, start

    sink = f"{pipeline}-out-{round_no}"
    create_topic(bootstrap, sink, 1)
    spec = PipelineSpec(pipeline, topic, f"topic:{sink}", bootstrap, os.path.join(workdir, f"ck-{pipeline}-{round_no}"),
                        lateness="30 seconds", available_now=True, max_offsets_per_trigger=max_offsets)
    began, tree = time.monotonic(), TreeCpu(os.getpid(), broker_pid)
    query = start(spark, spec)
    query.awaitTermination()
    wall = time.monotonic() - began
    cpu, python_cpu = tree.stop()
    jvm_threads = tree.jvm_threads()
    if query.exception() is not None:
        raise SystemExit(f"{pipeline} failed: {query.exception()}")
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in batches)
    seconds = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    steady = batches[1:] or batches  # a run's first microbatch also starts Python workers and state stores
    steady_rows = sum(p["numInputRows"] for p in steady)
    steady_s = sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000
    out = [json.loads(v) for _, v in read_to_end(bootstrap, sink, 1, "read_committed")]
    return {"rows": rows, "batches": len(batches), "seconds": round(seconds, 2), "wall_s": round(wall, 2),
            "events_per_s": round(rows / seconds), "steady_events_per_s": round(steady_rows / steady_s),
            "spark_cpu_s": round(cpu, 2), "python_workers_cpu_s": round(python_cpu, 2), "jvm_threads_cpu_s": jvm_threads,
            "events_per_spark_cpu_s": round(rows / cpu), "output": out}


def _alert_id(alert: dict) -> tuple:
    return alert["rule"], json.dumps(alert["key"], sort_keys=True), alert["match_start"]


PARTS = ("rules", "queries", "dense", "dense-queries")


def python_rules(compiled: list[CompiledRule], events: list[dict]) -> tuple[float, list, float]:
    """events/s (wall clock), the matches, events per CPU second (steadier on a shared machine)."""
    began, cpu = time.perf_counter(), time.process_time()
    found = [m for rule in compiled for m in match_events(rule, events)]
    return len(events) / (time.perf_counter() - began), found, len(events) / (time.process_time() - cpu)


def python_queries(searches: list[str], sample: list[dict]) -> dict:
    index = QueryIndex()
    for i, text in enumerate(searches):
        index.add(f"s{i}", text)
    began, cpu = time.perf_counter(), time.process_time()
    matched = sum(len(index.match(e)) for e in sample)
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    return {"events_per_s": round(len(sample) / seconds), "events_per_cpu_s": round(len(sample) / cpu),
            "evaluated_per_event": round(index.evaluated / len(sample), 1),
            "matches_per_event": round(matched / len(sample), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--dense-events", type=int, default=200_000)
    parser.add_argument("--listings", type=int, default=30_000)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--dense-queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-offsets", type=int, default=200_000, help="records per microbatch")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which to measure, of {','.join(PARTS)}")
    parser.add_argument("--jvm-options", default="", help="options for the Spark JVM (JAVA_TOOL_OPTIONS), e.g. "
                        "-XX:TieredStopAtLevel=1 to compare JIT settings")
    parser.add_argument("--steps", default="", help="the CEP stateful operators to alternate in the dense part, "
                        "of applyInPandasWithState,transformWithState (default: the pipeline's own)")
    parser.add_argument("--python-only", action="store_true", help="the pure-Python matchers only (no broker, "
                        "no Spark)")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting "
                        "for the session (repeatable), e.g. spark.sql.execution.arrow.maxRecordsPerBatch=50000")
    parser.add_argument("--spark-only", action="store_true", help="no pure-Python matcher rounds between the Spark "
                        "runs (the dense alerts are still checked against the pure-Python matcher's, found once)")
    args = parser.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    steps = [s.strip() for s in args.steps.split(",") if s.strip()] or [""]
    if steps != [""]:  # imported here: benchmarks/cep_step.py imports this file on older trees too
        from freshet.pipelines.cep import STEP_CONF, STEPS
    if steps != [""] and any(s not in STEPS for s in steps):
        raise SystemExit(f"--steps takes some of {','.join(STEPS)}")
    if any("=" not in kv for kv in args.spark_conf):
        raise SystemExit("--spark-conf takes KEY=VALUE")
    if not parts or any(p not in PARTS for p in parts):
        raise SystemExit(f"--parts takes some of {','.join(PARTS)}")

    from freshet.cli.gen_cmd import recent_start_ms

    start_ms = recent_start_ms()
    generated = security_events(args.events, sources=10_000, attacks=10, rate_per_s=500, seed=17, start_ms=start_ms)
    dense = dense_events(args.dense_events, start_ms=start_ms)
    houses = list(listings(args.listings, seed=3, start_ms=start_ms))
    searches, broad = saved_searches(args.queries), dense_searches(args.dense_queries)
    expected = sorted((p.rule, p.host) for p in generated.planted)
    compiled = [CompiledRule(r) for r in ruleset("intrusion")]
    dense_compiled = [CompiledRule(parse_rule(text)) for text in DENSE_RULES]
    dense_expected = {_alert_id(a): a for a in (m.alert() for m in python_rules(dense_compiled, dense)[1])}
    results: dict[str, list[float]] = {}

    def record(name: str, value: float, **shown) -> None:
        print(json.dumps({"what": name, "events_per_s": round(value), **shown,
                          "load_average": [round(x, 2) for x in os.getloadavg()]}), flush=True)
        results.setdefault(name, []).append(value)

    def python_round() -> None:
        if "rules" in parts:
            rate, found, per_cpu_s = python_rules(compiled, generated.events)
            record("rules_python", rate, events_per_cpu_s=round(per_cpu_s),
                   alerts_equal_planted=sorted((m.rule, m.key[0]) for m in found) == expected)
        if "dense" in parts:
            rate, found, per_cpu_s = python_rules(dense_compiled, dense)
            record("dense_rules_python", rate, events_per_cpu_s=round(per_cpu_s), alerts=len(found))
        if "queries" in parts:
            shown = python_queries(searches, houses[:5000])
            record("queries_python", shown.pop("events_per_s"), **shown)
        if "dense-queries" in parts:
            shown = python_queries(broad, houses[:5000])
            record("dense_queries_python", shown.pop("events_per_s"), **shown)

    print(json.dumps({"setup": {"events": len(generated.events), "planted": len(generated.planted),
                                "dense_events": len(dense), "dense_alerts": len(dense_expected),
                                "listings": len(houses), "queries": len(searches), "dense_queries": len(broad),
                                "machine": f"{os.cpu_count()} cores, {platform.machine()}"}}), flush=True)
    if args.python_only:
        for _ in range(args.rounds):
            python_round()
        summarize(results)
        return

    from freshet.spark import session

    if args.jvm_options:
        os.environ["JAVA_TOOL_OPTIONS"] = args.jvm_options
    workdir = tempfile.mkdtemp(prefix="freshet-bench-cep-")
    with BrokerProcess(data_dir=os.path.join(workdir, "log"), log_path=os.path.join(workdir, "broker.log")) as broker:
        bootstrap = broker.bootstrap
        for topic, events, key, used in (("security-events", generated.events, "src_ip", "rules"),
                                         ("dense-events", dense, "kind", "dense"),
                                         ("listings", houses, "listing_id", "queries")):
            if used not in parts and not (used == "queries" and "dense-queries" in parts):
                continue
            create_topic(bootstrap, topic, 4)
            produce_records(bootstrap, topic, ((str(e.get(key)).encode(), json.dumps(e).encode(),
                                                event_time_ms(e["event_time"])) for e in events))
        rules = StoredDefinitions(bootstrap, RULES_TOPIC)
        watches = StoredDefinitions(bootstrap, WATCHES_TOPIC)

        def stored(definitions: StoredDefinitions, wanted: list[tuple[str, str]]) -> None:
            """The topic holds ``wanted`` and nothing else (the pipelines' workers re-read it once a second)."""
            names = {name for name, _ in wanted}
            stale = [n for n in definitions.refresh() if n not in names]
            definitions._write([(name, None) for name in stale])  # tombstones with one producer (remove: one each)
            definitions.put_many(wanted)
            time.sleep(2 * REFRESH_S)

        extra = dict(kv.split("=", 1) for kv in args.spark_conf)
        spark = session("bench-cep", shuffle_partitions=2, extra=extra)
        runs = 0
        for round_no in range(args.rounds):
            if "rules" in parts:
                stored(rules, [(r.name, r.text) for r in ruleset("intrusion")])
                cep = run_pipeline(spark, "cep", "security-events", bootstrap, workdir, runs := runs + 1,
                                   args.max_offsets, broker.proc.pid)
                alerts = sorted((a["rule"], next(iter(a["key"].values()))) for a in cep.pop("output"))
                record("rules_spark", cep.pop("events_per_s"), **cep, alerts_equal_planted=alerts == expected)
                results.setdefault("rules_spark_steady", []).append(cep["steady_events_per_s"])
                results.setdefault("rules_spark_per_cpu_s", []).append(cep["events_per_spark_cpu_s"])
            if "dense" in parts:
                stored(rules, [(r.name, r.rule.text) for r in dense_compiled])
                # each step in turn, the order swapped every round (a run after another is warmer)
                for step in (steps if round_no % 2 == 0 else steps[::-1]):
                    if step:
                        spark.conf.set(STEP_CONF, step)
                    cep = run_pipeline(spark, "cep", "dense-events", bootstrap, workdir, runs := runs + 1,
                                       args.max_offsets, broker.proc.pid)
                    # a stream that does not end leaves its last matches pending (the watermark 30 s behind,
                    # WITHIN up to 10 minutes): every alert must be one the whole input gives, with the same values
                    alerts = {_alert_id(a): a for a in cep.pop("output")}
                    name = "dense_rules_spark" + (f"[{step}]" if len(steps) > 1 else "")
                    record(name, cep.pop("events_per_s"), **cep, step=step or "default", alerts=len(alerts),
                           alerts_of_python=len(alerts.keys() & dense_expected.keys()),
                           same_values=sum(json.dumps(a, sort_keys=True) == json.dumps(dense_expected.get(i),
                                           sort_keys=True) for i, a in alerts.items()))
                    results.setdefault(name + "_steady", []).append(cep["steady_events_per_s"])
                    results.setdefault(name + "_per_cpu_s", []).append(cep["events_per_spark_cpu_s"])
                    results.setdefault(name + "_spark_cpu_s", []).append(cep["spark_cpu_s"])
                    results.setdefault(name + "_python_cpu_s", []).append(cep["python_workers_cpu_s"])
            for part, texts in (("queries", searches), ("dense-queries", broad)):
                if part not in parts:
                    continue
                stored(watches, [(f"s{i}", text) for i, text in enumerate(texts)])
                watch = run_pipeline(spark, "watch", "listings", bootstrap, workdir, runs := runs + 1,
                                   args.max_offsets, broker.proc.pid)
                hits = sum(len(r["query_ids"]) for r in watch.pop("output"))
                name = part.replace("-", "_") + "_spark"
                record(name, watch.pop("events_per_s"), **watch,
                       matches_per_event=round(hits / max(1, watch["rows"]), 1))
                results.setdefault(name + "_steady", []).append(watch["steady_events_per_s"])
                results.setdefault(name + "_per_cpu_s", []).append(watch["events_per_spark_cpu_s"])
            if not args.spark_only:
                python_round()
        spark.stop()
    summarize(results)


def summarize(results: dict[str, list[float]]) -> None:
    summary = {name: {"median": round(statistics.median(v), 2), "min": round(min(v), 2), "max": round(max(v), 2)}
               for name, v in results.items()}
    print(json.dumps({"summary": summary, "targets": {"rules_spark": 100_000, "dense_rules_spark": 50_000,
                                                      "queries_spark": 10_000, "dense_queries_spark": 10_000}}))


if __name__ == "__main__":
    main()
