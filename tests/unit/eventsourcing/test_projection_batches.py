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
