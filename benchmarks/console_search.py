"""The console's search (issue 49): records scanned per second when searching a topic for a key, a value
substring and a JSON path, through ``freshet.dashboard.browse.search`` (what ``GET /api/topics/{t}/messages``
runs), against a broker of its own.

The topic: ``--records`` JSON records of 100 B to 1 KB (a user id, an amount, a padding field of random
length), over ``--partitions`` partitions, lz4-compressed as producers usually send them; one planted record
(key ``needle``, ``"user": "planted"``, an amount and a quantity no other record has) at three quarters of
partition 0. Each search starts at the oldest
record, reads forward with a scan budget above the topic's size and a limit of 50 (so it reads everything:
only the one planted record matches). Also timed: the time to the first progress line (the page's "first
matches on screen" stands on it).

Prints one JSON object: per search the records scanned, the wall-clock seconds and records per second (median
of ``--rounds``), records per CPU second of this process (the console's side alone; steadier on a shared
machine), and the machine's load average; then, on stderr, one line for README: each search's records per second
and how many reach the issue's 500k/s, e.g. ``console search, 1M JSON records (100 B-1 KB, 4 partitions, lz4),
median of 3, load 0.3-0.5: key 1.10M/s, ...; needing no string: $.amount > 999999 560k/s, ...; first progress line
after 0.02 s; >= 500k records/s: 8 of 8``. Run it on a quiet machine: on a shared one the wall-clock rate is what
the other work leaves (see docs/console.md).

``--baseline REV``: each search also runs with the search's filters (``browse.py``, ``json_paths.py`` and
``scan_columns.py`` of ``src/freshet/dashboard``) as they were at git revision REV (the rest of Freshet as it is
now), rounds alternating baseline and current, both reported, with the pairs in which the current one was faster.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time

from confluent_kafka import Producer

from freshet.dashboard import scan_columns
from freshet.local import BrokerProcess
from freshet.testing.topics import create_topic

TOPIC = "console-search-bench"
SEARCHES = {
    "key": (("needle", None, None, None)),
    "value substring": ((None, '"planted"', None, None)),
    "json path (plain)": ((None, None, None, '$.user == "planted"')),
    "json path (filter)": ((None, None, None, "$.items[?(@.sku == 'planted')]")),
    # paths that need no string: each value parsed, unless a number scan spares it
    "json path (number)": ((None, None, None, "$.amount > 999999")),
    "json path (descent)": ((None, None, None, "$..qty > 1")),
    "json path (or)": ((None, None, None, "$.items[?(@.sku == 'planted' || @.qty > 1)]")),
    "json path (regex)": ((None, None, None, "$.items[?(@.sku =~ '^plan')]")),
}


def fill(bootstrap: str, records: int, partitions: int, seed: int = 7) -> None:
    create_topic(bootstrap, TOPIC, partitions, {"retention.ms": "-1", "retention.bytes": "-1"})
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000})
    planted = records * 3 // 4 // partitions * partitions  # partition 0 under round robin
    for n in range(records):
        user = "planted" if n == planted else f"u{rng.randrange(100_000)}"
        sku = "planted" if n == planted else f"s{n % 1000}"
        value = {"user": user, "amount": 1_000_000 if n == planted else rng.randrange(10_000),
                 "items": [{"sku": sku, "qty": 2 if n == planted else 1}],
                 "pad": "x" * rng.randrange(20, 920)}
        while True:
            try:
                producer.produce(TOPIC, json.dumps(value).encode(), b"needle" if n == planted else b"k%d" % n,
                                 partition=n % partitions)
                break
            except BufferError:
                producer.poll(0.1)
        if n % 50_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0


def dashboard_at(revision: str):
    """The search as it was at git ``revision``: browse.py with the json_paths.py and scan_columns.py of that
    revision beside it (imported as a package of their own; the rest of Freshet as it is now)."""
    import importlib
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    package = os.path.join(tempfile.mkdtemp(), "dashboard_baseline")
    os.mkdir(package)
    open(os.path.join(package, "__init__.py"), "w").close()
    for name in ("browse.py", "json_paths.py", "scan_columns.py"):
        shown = subprocess.run(["git", "show", f"{revision}:src/freshet/dashboard/{name}"], cwd=root,
                               capture_output=True)
        if shown.returncode == 0:  # a module the revision did not have yet is taken as it is now
            with open(os.path.join(package, name), "wb") as f:
                f.write(shown.stdout)
        else:
            with open(os.path.join(package, name), "w") as f:
                f.write(f"from freshet.dashboard.{name[:-3]} import *  # noqa\n")
    sys.path.insert(0, os.path.dirname(package))
    return importlib.import_module("dashboard_baseline.browse")


def summary(runs: list[dict]) -> dict:
    seconds = statistics.median(r["seconds"] for r in runs)
    return {"scanned": runs[0]["scanned"], "seconds": round(seconds, 2),
            "records_per_s": round(runs[0]["scanned"] / seconds),
            "spread": [round(r["scanned"] / r["seconds"]) for r in runs],
            # the console process's own CPU (the broker's is not in it): steadier on a shared machine
            "records_per_cpu_s": round(runs[0]["scanned"] / statistics.median(r["cpu_s"] for r in runs)),
            "first_progress_s": round(statistics.median(r["first_progress_s"] for r in runs), 3)}


def rate(n: float) -> str:
    """Records per second as README writes them: 1.10M/s, 560k/s."""
    return f"{n / 1e6:.2f}M/s" if n >= 1e6 else f"{n / 1e3:.0f}k/s"


NEED_NO_STRING = {"json path (number)", "json path (descent)", "json path (or)", "json path (regex)"}
TARGET = 500_000  # records scanned per second (issue 49)


def summary_line(out: dict) -> str:
    """The one-line summary of a run (``main``'s JSON object) for README."""
    searches = out["searches"]
    shown = {name: f"{SEARCHES[name][3] or name} {rate(s['records_per_s'])}" for name, s in searches.items()}
    strings = [shown[n] for n in searches if n not in NEED_NO_STRING]
    others = [shown[n] for n in searches if n in NEED_NO_STRING]
    loads = [out["load_average_before"][0], out["load_average"][0]]
    met = sum(s["records_per_s"] >= TARGET for s in searches.values())
    first = max(s["first_progress_s"] for s in searches.values())
    parts = [", ".join(strings)] + ([f"needing no string: {', '.join(others)}"] if others else [])
    records = f"{out['records'] / 1e6:g}M" if out["records"] >= 1e6 else f"{out['records']:,}"
    return (f"console search, {records} JSON records (100 B-1 KB, {out['partitions']} partitions, lz4), median of "
            f"{out['rounds']}, load {min(loads):.1f}-{max(loads):.1f}: {'; '.join(parts)}; first progress line after "
            f"{first:.2f} s at most; >= 500k records/s: {met} of {len(searches)}")


def time_search(bootstrap: str, partitions: int, args: tuple, browse=None) -> dict:
    """One search as ``browse`` (a module: the current browse.py by default, or ``dashboard_at``'s) runs it."""
    if browse is None:
        from freshet.dashboard import browse
    scan = browse.Scan(TOPIC, list(range(partitions)), "oldest", None, None, False, 50, 100_000_000,
                       browse.Filters.parse(*args))
    first: list = []
    began, cpu = time.monotonic(), time.process_time()
    result = browse.search(bootstrap, scan, lambda p: first or first.append(time.monotonic() - began))
    took, cpu = time.monotonic() - began, time.process_time() - cpu
    assert len(result.records) == 1, result.progress
    return {"scanned": result.scanned, "seconds": took, "cpu_s": cpu, "first_progress_s": first[0] if first else took}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=list(SEARCHES), action="append")
    parser.add_argument("--readers", type=int, default=scan_columns.READERS,
                        help="columnar readers sharing a search's partitions (the console's default: %(default)s)")
    parser.add_argument("--baseline", metavar="REV", help="also time the search's filters (browse.py, json_paths.py, "
                        "scan_columns.py) as of git revision REV, rounds alternating with the current ones")
    parser.add_argument("--bootstrap", help="a running broker whose topic this benchmark filled before (with the same "
                        "--records and --partitions): searched again without filling it")
    args = parser.parse_args()
    scan_columns.READERS = args.readers
    baseline = dashboard_at(args.baseline) if args.baseline else None
    if baseline is not None:
        baseline.scan_columns.READERS = args.readers
    with tempfile.TemporaryDirectory() as data, \
            contextlib.nullcontext(argparse.Namespace(bootstrap=args.bootstrap)) if args.bootstrap else \
            BrokerProcess(data_dir=os.path.join(data, "broker")) as broker:
        began = time.monotonic()
        if not args.bootstrap:
            fill(broker.bootstrap, args.records, args.partitions)
        out: dict = {"records": args.records, "partitions": args.partitions, "fill_s": round(time.monotonic() - began, 1),
                     "python": sys.version.split()[0], "readers": args.readers, "baseline": args.baseline,
                     "rounds": args.rounds,
                     "load_average_before": os.getloadavg(), "searches": {}}
        for name in args.only or SEARCHES:
            runs: dict[str, list] = {"current": [], "baseline": []}
            for _ in range(args.rounds):
                if baseline is not None:
                    runs["baseline"].append(time_search(broker.bootstrap, args.partitions, SEARCHES[name], baseline))
                runs["current"].append(time_search(broker.bootstrap, args.partitions, SEARCHES[name]))
            out["searches"][name] = summary(runs["current"])
            if baseline is not None:
                out["searches"][name]["baseline"] = summary(runs["baseline"])
                out["searches"][name]["faster_in"] = sum(c["seconds"] < b["seconds"] for c, b in
                                                         zip(runs["current"], runs["baseline"]))
        out["load_average"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    print(summary_line(out), file=sys.stderr)  # for README (stdout stays one JSON object)


if __name__ == "__main__":
    main()
