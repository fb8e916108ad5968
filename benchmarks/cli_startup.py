"""How long the freshet command takes to start: the wall time of whole commands, as a user's shell sees it.

Each command runs ``--rounds`` times (default 10) against a broker this script starts on 127.0.0.1 and prints
the median, the fastest and the slowest: ``python -c pass`` (the interpreter alone, the floor), ``freshet
--help``, and client commands (``topic list``, ``produce`` of one record, ``watch add`` of one query); then
200 stored queries registered with one ``watch add --file`` against 200 ``watch add`` commands (the issue's
"two minutes"), and what importing ``freshet.cli.main`` costs (``python -X importtime``, its cumulative
microseconds). ``--src DIR`` runs another source tree's freshet (an old checkout: ``git archive REV src |
tar -x -C DIR``) in alternate rounds, so both are measured under the same load.

A client command that writes (produce, watch add) used to wait ~0.5 s in librdkafka for an idempotent
producer's id: its first metadata replaces the bootstrap connection, its producer-id request finds no broker up
yet and retries on a fixed 500 ms timer (the same against Kafka). ``freshet.client.produce.flush_delivered``
sends a metadata request while records wait, whose answer runs that request again at once. ``python -c "import
confluent_kafka"`` is the floor of any client command (interpreter and the Kafka client's import).

    python benchmarks/cli_startup.py [--rounds 10] [--src /tmp/freshet-before/src]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from freshet.local import BrokerProcess


def timed(argv: list[str], env: dict, stdin: str = "") -> float:
    began = time.perf_counter()
    run = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, timeout=300)
    took = time.perf_counter() - began
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:])} failed: {run.stderr.strip()[-500:]}")
    return took


def import_us(env: dict) -> int:
    """Cumulative microseconds of ``import freshet.cli.main``, from -X importtime's last line."""
    run = subprocess.run([sys.executable, "-X", "importtime", "-c", "import freshet.cli.main"], capture_output=True,
                         text=True, env=env, timeout=120)
    last = [line for line in run.stderr.splitlines() if line.endswith("| freshet.cli.main")][-1]
    return int(last.split("|")[1])


def summary(samples: list[float]) -> dict:
    return {"median_s": round(statistics.median(samples), 3), "min_s": round(min(samples), 3),
            "max_s": round(max(samples), 3), "runs": len(samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--queries", type=int, default=200, help="Stored queries registered in bulk.")
    parser.add_argument("--src", default=None, help="Another source tree to measure beside this checkout's.")
    args = parser.parse_args()

    trees = {"this checkout": dict(os.environ)}
    if args.src:
        trees["--src"] = {**os.environ, "PYTHONPATH": os.path.abspath(args.src)}
    freshet = [sys.executable, "-m", "freshet.cli.main"]
    with tempfile.TemporaryDirectory(prefix="freshet-cli-bench-") as tmp, \
            BrokerProcess(data_dir=os.path.join(tmp, "log")) as broker:
        bootstrap = ["--bootstrap", broker.bootstrap]
        subprocess.run([*freshet, "topic", "create", "cli-bench", *bootstrap], check=True, capture_output=True)
        commands = {
            "python -c pass": ([sys.executable, "-c", "pass"], ""),
            "python -c 'import confluent_kafka'": ([sys.executable, "-c", "import confluent_kafka"], ""),
            "freshet --help": ([*freshet, "--help"], ""),
            "freshet topic list": ([*freshet, "topic", "list", *bootstrap], ""),
            "freshet produce (1 record)": ([*freshet, "produce", "cli-bench", *bootstrap], "one record\n"),
            "freshet watch add QUERY": ([*freshet, "watch", "add", "city = Delft AND price < 400000", *bootstrap], ""),
        }
        results: dict[str, dict[str, list[float]]] = {tree: {name: [] for name in commands} for tree in trees}
        for round_ in range(args.rounds):
            order = list(trees) if round_ % 2 == 0 else list(reversed(trees))  # neither side always first
            for tree in order:
                for name, (argv, stdin) in commands.items():
                    results[tree][name].append(timed(argv, trees[tree], stdin))

        queries = os.path.join(tmp, "queries.txt")
        with open(queries, "w") as f:
            f.writelines(f"bench-{i}\tcity = Delft AND price < {400_000 + i}\n" for i in range(args.queries))
        bulk = [timed([*freshet, "watch", "add", "--file", queries, *bootstrap], trees["this checkout"])
                for _ in range(3)]

        for tree, by_name in results.items():
            for name, samples in by_name.items():
                print(json.dumps({"tree": tree, "command": name, **summary(samples)}))
            one = statistics.median(by_name["freshet watch add QUERY"])
            print(json.dumps({"tree": tree, "command": f"{args.queries} x freshet watch add QUERY (estimated)",
                              "median_s": round(one * args.queries, 1)}))
            print(json.dumps({"tree": tree, "command": "import freshet.cli.main (-X importtime)",
                              "median_us": statistics.median(import_us(trees[tree]) for _ in range(args.rounds))}))
        print(json.dumps({"tree": "this checkout", "command": f"freshet watch add --file ({args.queries} queries)",
                          **summary(bulk)}))
        print(json.dumps({"loadavg_1m": round(os.getloadavg()[0], 1), "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
