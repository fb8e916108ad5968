"""``freshet demo enrollment``: event sourcing on the log, step by step.

Students race for places in small courses; one processor per partition decides each course's commands in
order, so no course is ever over capacity. A roster projection follows the events into SQLite; a waiting
list is added later as a second projection rebuilt from offset 0; a student asks to be forgotten, and
their name is gone from every replay.
"""

from __future__ import annotations

import os
import random
import threading
import time

import click
from rich.table import Table

from freshet.eventsourcing import (
    FORGOTTEN,
    CommandClient,
    CommandProcessor,
    Database,
    EventStore,
    ProjectionRunner,
    SubjectKeys,
    rebuild,
    wait_for,
)
from freshet.eventsourcing.examples.enrollment import Cancel, Enroll, OpenCourse, Roster, WaitingList, app

from .preamble import Demo, data_dir_option

COURSES = {"streams": ("Stream processing", 4), "logs": ("Logs and replication", 3),
           "cdc": ("Change data capture", 5)}
NAMES = ["Ada", "Alan", "Barbara", "Claude", "Donald", "Edsger", "Frances", "Grace", "John", "Ken", "Leslie",
         "Margaret", "Niklaus", "Radia", "Shafi", "Tony", "Whitfield", "Yukihiro"]


@click.command("enrollment")
@click.option("--students", default=18, show_default=True, type=click.IntRange(min=len(COURSES)),
              help="How many students race for the places (at least one per course).")
@click.option("--clients", default=4, show_default=True, type=click.IntRange(min=1),
              help="Concurrent command clients.")
@data_dir_option("enrollment")
@click.option("--seed", default=1, show_default=True)
def enrollment_demo(students: int, clients: int, data_dir: str, seed: int) -> None:
    """Event sourcing: commands, ordered decisions, projections, a projection added later, forgetting."""
    with Demo(data_dir) as demo:
        _enrollment(demo, students, clients, seed)


def _enrollment(demo: Demo, students: int, clients: int, seed: int) -> None:
    console = demo.console
    bootstrap, database = demo.bootstrap, f"sqlite:{os.path.join(demo.data_dir, 'views.db')}"
    processor_thread = None
    try:
        app.create_topics(bootstrap)
        console.print(f"[bold]1. the log[/]: broker on {bootstrap}; topics "
                      f"{', '.join(t for t, _, _ in app.topic_specs())}")
        processor = CommandProcessor(app, bootstrap)
        processor_thread = threading.Thread(target=processor.run, daemon=True)
        processor_thread.start()
        console.print("[bold]2. the processor[/] decides each course's commands in order, one Kafka transaction "
                      "per batch (events + answers + input offsets)")

        with CommandClient(app, bootstrap) as client:
            for course, (title, capacity) in COURSES.items():
                client.execute(f"course/{course}", OpenCourse(title, capacity))
            outcome = _race(bootstrap, students, clients, seed)
            console.print(f"[bold]3. the race[/]: {students} students from {clients} clients asked for "
                          f"{sum(c for _, c in COURSES.values())} places: {outcome['accepted']} enrolled, "
                          f"{outcome['rejected']} refused ({outcome['reasons']})")
            cancelled = client.execute("course/streams", Cancel(outcome["first_in"]["streams"]))
            console.print(f"   {outcome['first_in']['streams']} cancels a place in streams: {cancelled.status}")

            roster = ProjectionRunner(app, Roster, database, bootstrap)
            roster.run(until_caught_up=True, timeout_s=60)
            console.print("[bold]4. a projection[/]: the roster in SQLite, written exactly once with its positions")
            console.print(_table(database, "SELECT course, title, enrolled, capacity FROM roster_courses ORDER BY course",
                                 ["course", "title", "enrolled", "capacity"]))

            client.execute("course/sql", OpenCourse("SQL", 2))
            late = client.execute("course/sql", Enroll("s-late", "Latecomer"))
            runner = threading.Thread(target=roster.run, daemon=True)
            runner.start()
            wait_for(database, "roster", late.partition, late.offset, app.events_topic, timeout_s=30)
            seen = _rows(database, "SELECT name FROM roster_students WHERE student_id = 's-late'")
            console.print(f"[bold]5. read your writes[/]: enrolled at offset {late.offset} of partition "
                          f"{late.partition}; the roster waited for it and shows {seen[0][0] if seen else 'nothing'}")

        generation, applied = rebuild(app, WaitingList, database, bootstrap)
        console.print(f"[bold]6. a projection added later[/]: waiting_list rebuilt from offset 0 "
                      f"({applied} events, generation {generation}); the old events needed no change")
        console.print(_table(database, "SELECT course, student_id, name FROM waiting_list_waiting "
                                       "ORDER BY course, since_version", ["waiting for", "student", "name"]))
        console.print(_table(database, "SELECT course, student_id, name, freed_by FROM waiting_list_offers",
                             ["course", "offered to", "name", "place freed by"]))

        subject = outcome["first_in"]["logs"]
        keys = SubjectKeys(bootstrap, app.keys_topic).load()
        keys.forget(subject)
        keys.close()
        _until(lambda: {name for name, in _rows(database, "SELECT name FROM roster_students WHERE student_id = ?",
                                                (subject,))} == {FORGOTTEN}, 30)  # the live roster's forget()
        rebuild(app, WaitingList, database, bootstrap)
        with EventStore(app, bootstrap) as store:
            names = {getattr(r.event, "name", None) for r in store.history("course/logs")
                     if getattr(r.event, "student_id", None) == subject}
            live = {s: a.state() for s, a in processor.aggregates.get(app.partition_of("course/logs"), {}).items()}
            replayed = store.replay(use_snapshots=False)
        console.print(f"[bold]7. forgetting[/]: {subject}'s key tombstoned; in a replay their name reads "
                      f"{' / '.join(sorted(map(str, names)))}")
        roster.stop()
        runner.join(10)
        roster.close()
        console.print(_table(database, "SELECT course, student_id, name FROM roster_students WHERE course = 'logs'",
                             ["course", "student", "name"]))
        over = [s for s, a in replayed.items() if len(a.enrolled) > a.capacity]
        same = all(replayed[s].state() == state for s, state in live.items())
        console.print(f"[bold]8. replay[/]: {len(replayed)} courses replayed from offset 0, none over capacity"
                      f"{' (!)' if over else ''}; equal to the processor's live state: {same}")
        if over or not same or FORGOTTEN not in names:
            raise SystemExit(1)
    finally:
        if processor_thread is not None:
            processor.stop()
            processor_thread.join(30)


def _race(bootstrap: str, students: int, clients: int, seed: int) -> dict:
    """``students`` students, each asking for two random courses, sent from ``clients`` threads at once; the
    first of them ask for one course each among their two, so that every course has a first student whatever
    the seed (the story goes on with one of them)."""
    rng = random.Random(seed)
    courses = sorted(COURSES)
    requests = []
    for i in range(students):
        wanted = [courses[i]] + rng.sample([c for c in courses if c != courses[i]], 1) if i < len(courses) \
            else rng.sample(courses, 2)
        requests.append((f"s{i}", NAMES[i % len(NAMES)], wanted))
    answers: list = []
    lock = threading.Lock()

    def send(share) -> None:
        with CommandClient(app, bootstrap) as client:
            ids = [(client.send(f"course/{course}", Enroll(sid, name)), sid, course)
                   for sid, name, courses in share for course in courses]
            got = client.answers([i for i, _, _ in ids], 60)
            with lock:
                answers.extend((got[i], sid, course) for i, sid, course in ids)

    threads = [threading.Thread(target=send, args=(requests[k::clients],)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    accepted = [(a, sid, course) for a, sid, course in answers if a.accepted]
    first_in: dict[str, str] = {}
    for a, sid, course in sorted(accepted, key=lambda x: x[0].version):
        first_in.setdefault(course, sid)
    reasons: dict[str, int] = {}
    for a, _, _ in answers:
        if not a.accepted:
            reasons[a.reason] = reasons.get(a.reason, 0) + 1
    return {"accepted": len(accepted), "rejected": len(answers) - len(accepted), "first_in": first_in,
            "reasons": ", ".join(f"{n} x {r}" for r, n in reasons.items()) or "none"}


def _rows(database: str, sql: str, params: tuple = ()) -> list[tuple]:
    db = Database(database)
    try:
        return db.execute(sql, params)
    finally:
        db.close()


def _until(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("the roster did not apply the forgetting in time")
        time.sleep(0.05)


def _table(database: str, sql: str, headers: list[str]) -> Table:
    table = Table(*headers)
    for row in _rows(database, sql):
        table.add_row(*map(str, row))
    return table
