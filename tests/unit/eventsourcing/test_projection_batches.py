"""A projection's set-wise ``handle_batch`` must leave the tables as ``handle`` one event at a time does,
however the events are cut into batches."""

import random

import pytest

from freshet.eventsourcing.events import RecordedEvent
from freshet.eventsourcing.examples.enrollment import (
    Cancel,
    Course,
    CourseOpened,
    Enroll,
    EnrollmentCancelled,
    EnrollmentRefused,
    OpenCourse,
    Rejected,
    Roster,
    StudentEnrolled,
)
from freshet.eventsourcing.projection import Database, Writer, physical_tables


def history(seed: int) -> list[RecordedEvent]:
    """Events the Course aggregate decides for random commands over a few courses (re-enrolments too)."""
    rng = random.Random(seed)
    courses = {f"c{i}": Course(f"c{i}") for i in range(4)}
    out = []
    for _ in range(300):
        cid = rng.choice(sorted(courses))
        student = f"s{rng.randrange(12)}"
        command = rng.choice([OpenCourse(cid, rng.randint(1, 4)), Enroll(student, f"Name {student}"),
                              Enroll(student, f"Renamed {student}"), Cancel(student)])
        course = courses[cid]
        try:
            events = course.decide(command)
        except Rejected as refused:
            events = refused.record
        for event in events:
            course.apply(event)
            course.version += 1
            out.append(RecordedEvent(f"course/{cid}", course.version, event))
    return out


def tables_after(events: list[RecordedEvent], cuts: list[int] | None, path) -> tuple:
    db = Database(f"sqlite:{path}")
    tables = physical_tables(Roster, 1)
    for physical, columns in zip(tables.values(), Roster.tables.values()):
        db.execute(f"CREATE TABLE {physical} ({columns})")
    writer, roster = Writer(db, tables), Roster()
    with db.transaction():
        if cuts is None:
            for recorded in events:
                roster.handle(recorded, writer)
        else:
            for start, end in zip([0, *cuts], [*cuts, len(events)]):
                roster.handle_batch(events[start:end], writer)
    result = (db.execute(f"SELECT * FROM {tables['courses']} ORDER BY course"),
              db.execute(f"SELECT * FROM {tables['students']} ORDER BY course, student_id"))
    db.close()
    return result


@pytest.mark.parametrize("seed", range(6))
def test_roster_batches_equal_one_event_at_a_time(seed, tmp_path):
    events = history(seed)
    kinds = {type(r.event) for r in events}
    assert {CourseOpened, StudentEnrolled, EnrollmentCancelled, EnrollmentRefused} <= kinds
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(events)), 5))
    one_by_one = tables_after(events, None, tmp_path / "one.db")
    assert one_by_one[1], "somebody stays enrolled"
    assert tables_after(events, cuts, tmp_path / "cut.db") == one_by_one
    assert tables_after(events, [], tmp_path / "whole.db") == one_by_one


def test_a_rebuild_is_split_over_processes_only_for_a_projection_keyed_by_aggregate(tmp_path):
    """Events of different partitions may be applied in any interleaving only when each row depends on one
    aggregate's events; a projection that does not say so is refused more than one worker (before anything
    is touched: no broker, no database needed)."""
    from freshet.eventsourcing.examples import enrollment
    from freshet.eventsourcing.projection import Projection, rebuild

    class Latest(Projection):  # the last event of the whole log: depends on the order across aggregates
        name = "latest"
        tables = {"latest": "id INTEGER PRIMARY KEY, stream TEXT"}

    assert Roster.keyed_by_aggregate and not Latest.keyed_by_aggregate
    url = f"sqlite:{tmp_path / 'views.db'}"
    with pytest.raises(ValueError, match="not keyed by aggregate"):
        rebuild(enrollment.app, Latest, url, "127.0.0.1:1", workers=2)
    with pytest.raises(ValueError, match="1 or more"):
        rebuild(enrollment.app, Roster, url, "127.0.0.1:1", workers=0)
    assert not (tmp_path / "views.db").exists()
