"""Course enrollment, the seeds' example: enroll, cancel, capacity; a roster read model; and a waiting
list added later as a second projection over the same events, without touching the first.

A student asking for a full course is refused, and the refusal is recorded as an event: that is what lets
the waiting list be derived afterwards ("the place is offered to the next person on the waiting list").
Students' names are personal data: sealed with the student's key, forgettable.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..aggregate import Aggregate, Application, Rejected
from ..events import FORGOTTEN, Codec, Command, Event, personal
from ..projection import Projection, Writer

codec = Codec()


@codec.register_command
@dataclass(frozen=True)
class OpenCourse(Command):
    title: str
    capacity: int


@codec.register_command
@dataclass(frozen=True)
class Enroll(Command):
    subject = "student_id"  # the name is sealed with the student's key in the commands topic too
    student_id: str
    name: str = personal()


@codec.register_command
@dataclass(frozen=True)
class Cancel(Command):
    student_id: str


@codec.register_event
@dataclass(frozen=True)
class CourseOpened(Event):
    title: str
    capacity: int


@codec.register_event
@dataclass(frozen=True)
class StudentEnrolled(Event):
    schema = 2  # schema 1 had one "student" field holding "id:name"
    subject = "student_id"
    student_id: str
    name: str = personal()


@codec.upcaster("StudentEnrolled", from_schema=1)
def _split_student(data: dict) -> dict:
    student_id, _, name = data.pop("student").partition(":")
    return {"student_id": student_id, "name": name, **data}


@codec.register_event
@dataclass(frozen=True)
class EnrollmentRefused(Event):
    subject = "student_id"
    student_id: str
    reason: str
    name: str = personal()


@codec.register_event
@dataclass(frozen=True)
class EnrollmentCancelled(Event):
    student_id: str


class Course(Aggregate):
    type_name = "course"

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.title, self.capacity, self.enrolled = "", 0, []

    def decide(self, command: Command) -> list[Event]:
        if isinstance(command, OpenCourse):
            if self.version:
                raise Rejected(f"course {self.id} is already open")
            if command.capacity < 1:
                raise Rejected("capacity must be at least 1")
            return [CourseOpened(command.title, command.capacity)]
        if not self.version:
            raise Rejected(f"course {self.id} is not open")
        if isinstance(command, Enroll):
            if command.student_id in self.enrolled:
                raise Rejected(f"{command.student_id} is already enrolled")
            if len(self.enrolled) >= self.capacity:
                raise Rejected("course is full", record=[EnrollmentRefused(command.student_id, "full", command.name)])
            return [StudentEnrolled(command.student_id, command.name)]
        if isinstance(command, Cancel):
            if command.student_id not in self.enrolled:
                raise Rejected(f"{command.student_id} is not enrolled")
            return [EnrollmentCancelled(command.student_id)]
        raise Rejected(f"a course does not take {type(command).__name__}")

    def apply(self, event: Event) -> None:
        if isinstance(event, CourseOpened):
            self.title, self.capacity = event.title, event.capacity
        elif isinstance(event, StudentEnrolled):
            self.enrolled.append(event.student_id)
        elif isinstance(event, EnrollmentCancelled):
            self.enrolled.remove(event.student_id)


app = Application("enrollment", [Course], codec, partitions=4, snapshot_every=50)


@app.projection
class Roster(Projection):
    """Who is enrolled where, and how full each course is."""

    name = "roster"
    keyed_by_aggregate = True  # every row is one course's (or ledger's): a rebuild may split the partitions
    tables = {
        "courses": "course TEXT PRIMARY KEY, title TEXT, capacity INTEGER, enrolled INTEGER",
        "students": "course TEXT, student_id TEXT, name TEXT, PRIMARY KEY (course, student_id)",
    }

    def handle(self, recorded, db: Writer) -> None:
        event, course = recorded.event, recorded.aggregate_id
        if isinstance(event, CourseOpened):
            db.execute("INSERT INTO {courses} VALUES (?, ?, ?, 0)", (course, event.title, event.capacity))
        elif isinstance(event, StudentEnrolled):
            db.execute("INSERT INTO {students} VALUES (?, ?, ?)", (course, event.student_id, event.name))
            db.execute("UPDATE {courses} SET enrolled = enrolled + 1 WHERE course = ?", (course,))
        elif isinstance(event, EnrollmentCancelled):
            db.execute("DELETE FROM {students} WHERE course = ? AND student_id = ?", (course, event.student_id))
            db.execute("UPDATE {courses} SET enrolled = enrolled - 1 WHERE course = ?", (course,))

    def handle_batch(self, events: list, db: Writer) -> None:
        """The same as ``handle`` on each event, written set-wise: the batch's net effect per course and
        per student, then one ``executemany`` per kind of statement (a rebuild runs 4-5x as fast)."""
        opened, enrolled, delta = [], {}, {}
        for recorded in events:
            event, course = recorded.event, recorded.aggregate_id
            if isinstance(event, CourseOpened):
                opened.append((course, event.title, event.capacity))
            elif isinstance(event, StudentEnrolled):
                enrolled[(course, event.student_id)] = event.name
                delta[course] = delta.get(course, 0) + 1
            elif isinstance(event, EnrollmentCancelled):
                enrolled[(course, event.student_id)] = None
                delta[course] = delta.get(course, 0) - 1
        db.executemany("INSERT INTO {courses} VALUES (?, ?, ?, 0)", opened)
        db.executemany("DELETE FROM {students} WHERE course = ? AND student_id = ?",
                       [key for key, name in enrolled.items() if name is None])
        db.executemany("INSERT INTO {students} VALUES (?, ?, ?) ON CONFLICT (course, student_id) DO UPDATE "
                       "SET name = excluded.name", [(*key, name) for key, name in enrolled.items() if name is not None])
        db.executemany("UPDATE {courses} SET enrolled = enrolled + ? WHERE course = ?",
                       [(n, course) for course, n in delta.items() if n])

    def forget(self, subject: str, db: Writer) -> None:
        db.execute("UPDATE {students} SET name = ? WHERE student_id = ?", (FORGOTTEN, subject))


@app.projection
class WaitingList(Projection):
    """Added later, over the same events: students refused for a full course wait in order; when a place
    frees up it is offered to the first of them."""

    name = "waiting_list"
    keyed_by_aggregate = True  # every row is one course's (or ledger's): a rebuild may split the partitions
    tables = {
        "waiting": "course TEXT, student_id TEXT, name TEXT, since_version INTEGER, PRIMARY KEY (course, student_id)",
        "offers": "course TEXT, student_id TEXT, name TEXT, freed_by TEXT, PRIMARY KEY (course, student_id)",
    }

    def handle(self, recorded, db: Writer) -> None:
        event, course = recorded.event, recorded.aggregate_id
        if isinstance(event, EnrollmentRefused):
            db.execute("INSERT INTO {waiting} VALUES (?, ?, ?, ?) ON CONFLICT (course, student_id) DO NOTHING",
                       (course, event.student_id, event.name, recorded.version))
        elif isinstance(event, StudentEnrolled):  # took a place (an offer, or luck): no longer waiting
            db.execute("DELETE FROM {waiting} WHERE course = ? AND student_id = ?", (course, event.student_id))
            db.execute("DELETE FROM {offers} WHERE course = ? AND student_id = ?", (course, event.student_id))
        elif isinstance(event, EnrollmentCancelled):
            first = db.execute("SELECT student_id, name FROM {waiting} WHERE course = ? "
                               "ORDER BY since_version LIMIT 1", (course,))
            if first:
                student_id, name = first[0]
                db.execute("DELETE FROM {waiting} WHERE course = ? AND student_id = ?", (course, student_id))
                db.execute("INSERT INTO {offers} VALUES (?, ?, ?, ?) ON CONFLICT (course, student_id) DO NOTHING",
                           (course, student_id, name, event.student_id))

    def forget(self, subject: str, db: Writer) -> None:
        db.execute("UPDATE {waiting} SET name = ? WHERE student_id = ?", (FORGOTTEN, subject))
        db.execute("UPDATE {offers} SET name = ? WHERE student_id = ?", (FORGOTTEN, subject))
