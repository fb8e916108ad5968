"""Quix Streams in exactly-once mode against a Freshet broker: a stream processor people already use.

Quix Streams pins its own confluent-kafka, so it runs in a virtualenv of its own (made on first use in
``.venv-quix`` beside the project's; ``--venv`` to choose). The check starts a Freshet broker, writes
``--events`` events over ``--users`` users, and runs a Quix Streams application with
``processing_guarantee="exactly-once"`` that keeps a running count per user in its state store (changelog
topic, transactions) and writes ``{"user", "n"}`` for every event. The application is killed -9
``--kills`` times mid-stream and restarted on the same state directory and consumer group. Exactly once
means: for every user the outputs a read_committed reader sees are 1, 2, ..., the user's event count, each
once. Prints one JSON object; exits 1 if anything is lost or repeated.

    .venv/bin/python scripts/check_quix_exactly_once.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

from confluent_kafka import Producer

from freshet.local import BrokerProcess
from freshet.testing.topics import create_topic, read_to_end

APP = r'''
import sys
from quixstreams import Application

bootstrap, source, sink, state_dir = sys.argv[1:5]
app = Application(broker_address=bootstrap, consumer_group="quix-eos", auto_offset_reset="earliest",
                  processing_guarantee="exactly-once", state_dir=state_dir, commit_interval=0.5,
                  loglevel="WARNING")
events = app.topic(source, value_deserializer="json")
counts = app.topic(sink, value_serializer="json")

def count(value, state):
    n = state.get("n", 0) + 1
    state.set("n", n)
    return {"user": value["user"], "n": n}

app.dataframe(events).apply(count, stateful=True).to_topic(counts)
app.run()
'''


def quix_python(venv: str) -> str:
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", "quixstreams>=3.28,<4"], check=True)
    return python


def read_committed(bootstrap: str, topic: str, partitions: int) -> list[dict]:
    return [json.loads(value) for _, value in read_to_end(bootstrap, topic, partitions, timeout_s=120)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--users", type=int, default=500)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--venv", default=os.path.join(os.path.dirname(__file__), "..", ".venv-quix"))
    args = ap.parse_args()
    python = quix_python(os.path.abspath(args.venv))
    rng = random.Random(11)
    users = [f"user-{rng.randrange(args.users)}" for _ in range(args.events)]
    with tempfile.TemporaryDirectory(prefix="quix-eos-") as work, \
            BrokerProcess(extra_args=["--cleaner-interval-ms", "3600000"]) as broker:
        create_topic(broker.bootstrap, "events", 3)
        create_topic(broker.bootstrap, "counts", 3)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for user in users:
            producer.produce("events", json.dumps({"user": user}).encode(), user.encode())
        producer.flush(60)
        app_path = os.path.join(work, "app.py")
        with open(app_path, "w") as f:
            f.write(APP)
        cmd = [python, app_path, broker.bootstrap, "events", "counts", os.path.join(work, "state")]
        started = time.monotonic()
        for _ in range(args.kills):
            app = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(4, 10))  # mid-stream: the kill lands wherever the application is
            app.kill()
            app.wait()
        app = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "app.log"), "w"))
        try:
            seen: list[dict] = []
            deadline = time.monotonic() + 300
            while len(seen) < args.events and time.monotonic() < deadline:
                time.sleep(2)
                seen = read_committed(broker.bootstrap, "counts", 3)
        finally:
            app.terminate()
            app.wait(30)
        elapsed = time.monotonic() - started
    expected: dict[str, int] = {}
    for user in users:
        expected[user] = expected.get(user, 0) + 1
    by_user: dict[str, list[int]] = {}
    for out in seen:
        by_user.setdefault(out["user"], []).append(out["n"])
    wrong = {u: ns for u, ns in by_user.items() if sorted(ns) != list(range(1, expected.get(u, 0) + 1))}
    missing = [u for u in expected if u not in by_user]
    result = {"check": "quix-streams exactly-once", "events": args.events, "users": len(expected),
              "kills": args.kills, "outputs_read_committed": len(seen), "users_wrong": len(wrong),
              "users_missing": len(missing), "seconds": round(elapsed, 1), "ok": not wrong and not missing,
              "date": time.strftime("%Y-%m-%d")}
    if wrong:
        user = next(iter(wrong))
        result["example"] = {"user": user, "expected": expected.get(user), "outputs": sorted(wrong[user])[:20]}
    print(json.dumps(result), flush=True)
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
