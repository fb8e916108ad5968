"""Event sourcing: commands decided and appended per second, and rebuilds per second.

Starts a Freshet broker on 127.0.0.1 (fsync'd group commit on) and runs the enrollment example under a
fresh name (4 partitions). Per round:

- commands: ``--aggregates`` OpenCourse commands then ``--commands`` Enroll commands spread over them are
  appended to the commands topic first; then one CommandProcessor decides them all (each batch one Kafka
  transaction: events, answers, snapshots, input offsets). Figure: commands decided / s, from the
  processor's first batch to its last commit.
- round trip: ``--round-trip`` commands sent by a CommandClient and every answer awaited (8 in flight per
  stream, as many streams as aggregates).
- rebuild (state): every aggregate replayed from offset 0 (no snapshots), events / s.
- rebuild (projection): the roster projection rebuilt into SQLite from offset 0, events / s: as ``rebuild``
  does by default (the roster is keyed by aggregate: the partitions split over one process per core), and in
  one process.

If the Python ``eventsourcing`` library is installed (``pip install eventsourcing``), the same course logic
runs on it with SQLite in the same process, for comparison: commands / s (each one get + save) and a
replay of every aggregate.

Prints one JSON object per measurement and a summary with medians and spread.
Targets (issue [eventsourcing]): >= 20,000 commands/s, >= 200,000 events/s rebuild.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)  # this script's name would shadow the eventsourcing library it compares with

from confluent_kafka import Producer

from freshet.eventsourcing import CommandClient, CommandProcessor, EventStore, rebuild
from freshet.eventsourcing.examples import enrollment
from freshet.eventsourcing.examples.enrollment import Enroll, Roster
from freshet.eventsourcing.processor import encode_command
from freshet.eventsourcing.projection import default_rebuild_workers
from freshet.client.groups import GroupAdmin
from freshet.local import BrokerProcess


def emit(result: dict) -> dict:
    print(json.dumps(result), flush=True)
    return result


def command_plan(aggregates: int, commands: int) -> tuple[list[str], list[tuple[str, str, dict]]]:
    rng = random.Random(7)
    streams = [f"course/c{i}" for i in range(aggregates)]
    plan = [(s, "OpenCourse", {"title": s, "capacity": 50}) for s in streams]
    plan += [(rng.choice(streams), "Enroll", {"student_id": f"s{i}", "name": f"Student {i}"}) for i in range(commands)]
    return streams, plan


def append_commands(bootstrap: str, app, plan: list[tuple[str, str, dict]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 2_000_000})
    for stream, type_name, data in plan:
        while True:
            try:
                producer.produce(app.commands_topic, encode_command(uuid.uuid4().hex, type_name, data),
                                 stream.encode(), partition=app.partition_of(stream))
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def processes_round(bootstrap: str, aggregates: int, commands: int, processes: int) -> dict:
    """``processes`` processors (``freshet es process``, each its own transactional id) share the partitions
    as one consumer group; once they have, the commands are appended. Figure: commands / s from the first
    command appended to the last input offset committed (so it includes appending them)."""
    app = enrollment.app.named(f"bench-{uuid.uuid4().hex[:8]}")
    app.create_topics(bootstrap)
    _, plan = command_plan(aggregates, commands)
    procs = [subprocess.Popen([sys.executable, "-m", "freshet.cli.main", "es", "process", "enrollment", "--name",
                               app.name, "--transactional-id", f"{app.name}.processor-{i}", "-b", bootstrap],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(processes)]
    groups = GroupAdmin(bootstrap)
    group = f"{app.name}.processor"
    try:
        deadline = time.monotonic() + 120
        while True:  # every processor a member, every partition assigned
            try:
                info = groups.describe(group)
                if len(info.members) == processes and info.state.lower() == "stable" and len(
                        {p.partition for p in info.partitions if p.member}) == app.partitions:
                    break
            except Exception:  # the group is not there yet
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{processes} processors did not share the partitions in 120 s")
            time.sleep(0.2)
        start = time.perf_counter()
        append_commands(bootstrap, app, plan)
        while sum(max(p.committed, 0) for p in groups.describe(group).partitions) < len(plan):
            time.sleep(0.02)
        elapsed = time.perf_counter() - start
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
    return emit({"system": "freshet", "measure": f"commands appended, decided, committed: {processes} processor "
                 "processes", "commands": len(plan), "seconds": round(elapsed, 3), "per_s": round(len(plan) / elapsed)})


def freshet_round(bootstrap: str, aggregates: int, commands: int, round_trip: int, workdir: str) -> list[dict]:
    app = enrollment.app.named(f"bench-{uuid.uuid4().hex[:8]}")
    app.create_topics(bootstrap)
    streams, plan = command_plan(aggregates, commands)
    append_commands(bootstrap, app, plan)

    processor = CommandProcessor(app, bootstrap, max_batch=5000)
    first = [0.0]
    original = processor._decide_batch

    def timed(batch):
        if not first[0]:
            first[0] = time.perf_counter()
        original(batch)

    processor._decide_batch = timed
    thread = threading.Thread(target=processor.run, daemon=True)
    thread.start()
    while processor.stats.commands < len(plan):
        time.sleep(0.01)
    while processor.stats.transactions and processor.stats.positions and sum(
            processor.stats.positions.values()) < len(plan):
        time.sleep(0.01)
    decided = time.perf_counter() - first[0]
    results = [emit({"system": "freshet", "measure": "commands decided and appended", "commands": len(plan),
                     "events": processor.stats.events, "transactions": processor.stats.transactions,
                     "seconds": round(decided, 3), "per_s": round(len(plan) / decided)})]

    with CommandClient(app, bootstrap) as client:
        start = time.perf_counter()
        ids = []
        for i in range(round_trip):
            ids.append(client.send(streams[i % len(streams)], Enroll(f"rt{i}", "Round Trip")))
            if len(ids) >= 8 * len(streams) or i == round_trip - 1:
                client.answers(ids, 120)
                ids = []
        elapsed = time.perf_counter() - start
    results.append(emit({"system": "freshet", "measure": "command round trips (send, decide, answer)",
                         "commands": round_trip, "seconds": round(elapsed, 3), "per_s": round(round_trip / elapsed)}))
    processor.stop()
    thread.join(30)

    with EventStore(app, bootstrap) as store:
        store.replay(use_snapshots=False)  # warm: the consumer's connection and metadata
        start = time.perf_counter()
        replayed = store.replay(use_snapshots=False)
        elapsed = time.perf_counter() - start
    events = sum(a.version for a in replayed.values())
    results.append(emit({"system": "freshet", "measure": "rebuild: every aggregate from offset 0", "events": events,
                         "aggregates": len(replayed), "seconds": round(elapsed, 3), "per_s": round(events / elapsed)}))

    # the roster is keyed by aggregate: by default its rebuild splits the partitions over one process per core
    default = default_rebuild_workers(app, Roster)
    for workers, measure in ((None, f"rebuild: roster projection into SQLite ({default} processes)"),
                             (1, "rebuild: roster projection into SQLite (1 process)")):
        database = f"sqlite:{os.path.join(workdir, app.name + f'-{workers}.db')}"
        start = time.perf_counter()
        _, applied = rebuild(app, Roster, database, bootstrap, workers=workers)
        elapsed = time.perf_counter() - start
        results.append(emit({"system": "freshet", "measure": measure, "events": applied,
                             "seconds": round(elapsed, 3), "per_s": round(applied / elapsed)}))
    return results


@functools.cache
def library_application():
    """The same course logic on the Python eventsourcing library (classes made once: it registers them)."""
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event

    class Course(Aggregate):
        @event("Opened")
        def __init__(self, title: str, capacity: int) -> None:
            self.title, self.capacity, self.enrolled = title, capacity, []

        @event("Enrolled")
        def enroll(self, student_id: str, name: str) -> None:
            self.enrolled.append(student_id)

    class Courses(Application):
        def open(self, title: str, capacity: int):
            course = Course(title, capacity)
            self.save(course)
            return course.id

        def enroll(self, course_id, student_id: str, name: str) -> bool:
            course = self.repository.get(course_id)
            if len(course.enrolled) >= course.capacity or student_id in course.enrolled:
                return False
            course.enroll(student_id, name)
            self.save(course)
            return True

    return Courses


def library_round(aggregates: int, commands: int, workdir: str) -> list[dict]:
    """The same course logic on the Python eventsourcing library, SQLite persistence."""
    Courses = library_application()
    path = os.path.join(workdir, f"lib-{uuid.uuid4().hex[:8]}.db")
    courses = Courses(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": path})
    rng = random.Random(7)
    start = time.perf_counter()
    ids = [courses.open(f"c{i}", 50) for i in range(aggregates)]
    for i in range(commands):
        courses.enroll(rng.choice(ids), f"s{i}", f"Student {i}")
    elapsed = time.perf_counter() - start
    total = aggregates + commands
    results = [emit({"system": "eventsourcing (Python library, SQLite)", "measure": "commands decided and appended",
                     "commands": total, "seconds": round(elapsed, 3), "per_s": round(total / elapsed)})]
    start = time.perf_counter()
    events = sum(courses.repository.get(i).version for i in ids)
    elapsed = time.perf_counter() - start
    results.append(emit({"system": "eventsourcing (Python library, SQLite)",
                         "measure": "rebuild: every aggregate from offset 0", "events": events,
                         "seconds": round(elapsed, 3), "per_s": round(events / elapsed)}))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--aggregates", type=int, default=10_000)
    parser.add_argument("--commands", type=int, default=100_000)
    parser.add_argument("--round-trip", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", default="2", help="comma-separated processor process counts to run too "
                        "(each in its own round; empty: none)")
    args = parser.parse_args()
    try:
        import eventsourcing  # noqa: F401
        library = True
    except ImportError:
        library = False
    workdir = tempfile.mkdtemp(prefix="es-bench-")
    results: list[dict] = []
    with BrokerProcess(os.path.join(workdir, "log")) as broker:
        for _ in range(args.rounds):  # alternate the two systems, round by round
            results += freshet_round(broker.bootstrap, args.aggregates, args.commands, args.round_trip, workdir)
            for n in [int(x) for x in args.processes.split(",") if x.strip()]:
                results.append(processes_round(broker.bootstrap, args.aggregates, args.commands, n))
            if library:
                results += library_round(args.aggregates, args.commands, workdir)
    summary = {}
    for r in results:
        summary.setdefault(f"{r['system']}: {r['measure']}", []).append(r["per_s"])
    print(json.dumps({"summary": {k: {"median_per_s": statistics.median(v), "min": min(v), "max": max(v),
                                      "rounds": len(v)} for k, v in summary.items()},
                      "aggregates": args.aggregates, "commands": args.commands, "partitions": 4,
                      "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
                      "date": time.strftime("%Y-%m-%d")}, indent=2))


if __name__ == "__main__":
    main()
