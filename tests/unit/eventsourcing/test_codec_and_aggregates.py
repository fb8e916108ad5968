"""Events as stored (sealed personal fields, upcasting of old schemas) and the example aggregates'
decisions, without a broker."""

import json

import pytest

from freshet.eventsourcing import FORGOTTEN, Rejected, SchemaError, SubjectKeys
from freshet.eventsourcing.examples.enrollment import (
    Cancel,
    Course,
    CourseOpened,
    Enroll,
    EnrollmentRefused,
    OpenCourse,
    StudentEnrolled,
    codec,
)
from freshet.eventsourcing.examples.ledger import (
    AccountOpened,
    Ledger,
    OpenAccount,
    Post,
    Posted,
    balance_as_of,
)
from freshet.eventsourcing.store import Snapshot


def keys() -> SubjectKeys:
    return SubjectKeys("unused:9092", "t.keys")  # sealing and opening need no broker until a key is missing


def test_personal_fields_are_sealed_and_open_with_the_subjects_key():
    store = keys()
    value = codec.encode_event("course/c1", 2, StudentEnrolled("s1", "Ada Lovelace"), store)
    assert b"Ada" not in value and b"s1" in value  # the subject id stays readable, the name does not
    assert [ref for ref, _ in store.take_created()] == [json.loads(value)["data"]["name"]["key"]]
    recorded = codec.decode_event(value, store)
    assert recorded.event == StudentEnrolled("s1", "Ada Lovelace")
    assert (recorded.stream, recorded.version, recorded.aggregate_id) == ("course/c1", 2, "c1")


def test_without_the_key_a_personal_field_reads_forgotten_and_the_rest_stays():
    value = codec.encode_event("course/c1", 2, StudentEnrolled("s1", "Ada Lovelace"), keys())
    recorded = codec.decode_event(value, keys())  # another key store: the subject's key is not there
    assert recorded.event == StudentEnrolled("s1", FORGOTTEN)


def test_a_tampered_ciphertext_does_not_open():
    store = keys()
    doc = json.loads(codec.encode_event("course/c1", 1, StudentEnrolled("s1", "Ada"), store))
    sealed = bytearray(doc["data"]["name"]["sealed"].encode())
    sealed[-3] = ord("A") if sealed[-3] != ord("A") else ord("B")
    doc["data"]["name"]["sealed"] = sealed.decode()
    assert codec.decode_event(json.dumps(doc).encode(), store).event.name == FORGOTTEN


def test_each_subject_has_its_own_key_and_a_pending_key_can_be_dropped():
    store = keys()
    a = json.loads(codec.encode_event("course/c1", 1, StudentEnrolled("s1", "A"), store))["data"]["name"]["key"]
    b = json.loads(codec.encode_event("course/c1", 2, StudentEnrolled("s2", "B"), store))["data"]["name"]["key"]
    again = json.loads(codec.encode_event("course/c2", 1, StudentEnrolled("s1", "A"), store))["data"]["name"]["key"]
    assert a != b and a == again and a.startswith("s1/") and b.startswith("s2/")
    store.forget_pending()  # the transaction that would have appended them did not commit
    assert store.subjects() == set()


def test_old_schemas_are_upcast_as_they_are_read():
    old = json.dumps({"type": "StudentEnrolled", "schema": 1, "stream": "course/c1", "version": 3,
                      "data": {"student": "s7:Grace Hopper"}}).encode()
    assert codec.decode_event(old, keys()).event == StudentEnrolled("s7", "Grace Hopper")


@pytest.mark.parametrize("doc, message", [
    ({"type": "Nope", "schema": 1, "stream": "course/c", "version": 1, "data": {}}, "unknown event type"),
    ({"type": "CourseOpened", "schema": 9, "stream": "course/c", "version": 1, "data": {}}, "newer than"),
    ({"type": "CourseOpened", "schema": 1, "stream": "course/c", "version": 1, "data": {"x": 1}}, "CourseOpened"),
    ({"type": "CourseOpened"}, "not a stored event"),
])
def test_events_this_code_cannot_read_are_refused_with_the_reason(doc, message):
    with pytest.raises(SchemaError, match=message):
        codec.decode_event(json.dumps(doc).encode(), keys())


def test_unregistered_classes_and_commands_are_refused():
    from dataclasses import dataclass

    from freshet.eventsourcing import Command, Event

    @dataclass(frozen=True)
    class Stray(Event):
        x: int

    with pytest.raises(SchemaError, match="not registered"):
        codec.encode_event("course/c", 1, Stray(1), keys())
    with pytest.raises(SchemaError, match="unknown command"):
        codec.command_from("Teleport", {})
    with pytest.raises(SchemaError, match="Enroll"):
        codec.command_from("Enroll", {"student_id": "s1"})  # a field missing
    with pytest.raises(TypeError, match="personal fields"):
        @codec.register_event
        @dataclass(frozen=True)
        class NoSubject(Event):
            name: str = __import__("freshet.eventsourcing", fromlist=["personal"]).personal()
    with pytest.raises(TypeError, match="dataclass deriving from Command"):
        codec.register_command(type("NotACommand", (Command,), {}))


def test_commands_personal_fields_are_sealed_with_the_subjects_key_and_read_forgotten_without_it():
    store = keys()
    data = codec.seal_command("Enroll", {"student_id": "s1", "name": "Ada Lovelace"}, store)
    assert b"Ada" not in json.dumps(data).encode() and data["student_id"] == "s1"
    assert codec.command_from("Enroll", data, store) == Enroll("s1", "Ada Lovelace")
    assert codec.open_command("Enroll", data, store) == {"student_id": "s1", "name": "Ada Lovelace"}
    # the same subject's events are sealed with the same key: forgetting it shreds both
    event = json.loads(codec.encode_event("course/c1", 2, StudentEnrolled("s1", "Ada"), store))
    assert event["data"]["name"]["key"] == data["name"]["key"]
    assert codec.seal_command("OpenCourse", {"title": "T", "capacity": 1}, None) == {"title": "T", "capacity": 1}
    stranger = keys()  # a reader without the key (as after forgetting)
    assert codec.open_command("Enroll", data, stranger) == {"student_id": "s1", "name": FORGOTTEN}
    assert codec.command_from("Enroll", data, stranger) == Enroll("s1", FORGOTTEN)
    appended = codec.seal_appended(StudentEnrolled("s1", "Ada Lovelace"), store)
    assert b"Ada" not in json.dumps(appended).encode()
    assert codec.open_appended(appended, store) == StudentEnrolled("s1", "Ada Lovelace")


@pytest.mark.parametrize("data, message", [
    ({"student_id": "s1", "nmae": "Ada"}, r"^Enroll has no field 'nmae' \(it takes: student_id, name\)$"),
    ({"student_id": "s1"}, r"^Enroll needs field 'name' \(it takes: student_id, name\)$"),
    ([1, 2], r"^Enroll: fields must be a JSON object, not list$"),
])
def test_a_command_with_fields_its_class_does_not_take_is_refused_naming_them(data, message):
    with pytest.raises(SchemaError, match=message):
        codec.command_from("Enroll", data)
    with pytest.raises(SchemaError, match=message):
        codec.seal_command("Enroll", data, keys())


def test_personal_command_fields_need_a_subject():
    from dataclasses import dataclass

    from freshet.eventsourcing import Command, personal

    with pytest.raises(TypeError, match="personal fields"):
        @codec.register_command
        @dataclass(frozen=True)
        class NoSubject(Command):
            name: str = personal()


def fold(agg, events):
    for e in events:
        agg.apply(e)
        agg.version += 1
    return agg


def test_a_course_never_takes_more_students_than_places_and_records_the_refusal():
    course = fold(Course("c1"), Course("c1").decide(OpenCourse("Streams", 1)))
    course = fold(course, course.decide(Enroll("s1", "Ada")))
    with pytest.raises(Rejected) as refused:
        course.decide(Enroll("s2", "Alan"))
    assert refused.value.reason == "course is full"
    assert refused.value.record == [EnrollmentRefused("s2", "full", "Alan")]
    with pytest.raises(Rejected, match="already enrolled"):
        course.decide(Enroll("s1", "Ada"))
    with pytest.raises(Rejected, match="not enrolled"):
        course.decide(Cancel("s9"))
    with pytest.raises(Rejected, match="not open"):
        Course("c2").decide(Enroll("s1", "Ada"))
    course = fold(course, course.decide(Cancel("s1")))
    assert course.enrolled == [] and course.version == 3


def test_snapshots_restore_the_same_state():
    course = fold(Course("c1"), [CourseOpened("Streams", 3), StudentEnrolled("s1", "Ada"),
                                 StudentEnrolled("s2", "Alan")])
    snap = Snapshot.decode("course/c1", Snapshot("course/c1", course.version, 41, course.snapshot()).encode())
    again = Course("c1")
    again.restore(snap.state)
    again.version = snap.version
    assert again.state() == course.state() and snap.offset == 41


def test_a_ledger_posts_double_entries_and_never_goes_below_zero():
    ledger = Ledger("book")
    for command in (OpenAccount("cash", allow_negative=True), OpenAccount("alice"), OpenAccount("bob")):
        ledger = fold(ledger, ledger.decide(command))
    ledger = fold(ledger, ledger.decide(Post({"cash": -100, "alice": 100}, "deposit", "2026-01-01")))
    with pytest.raises(Rejected, match="sum to zero"):
        ledger.decide(Post({"alice": -50, "bob": 40}, "lossy", "2026-01-02"))
    with pytest.raises(Rejected, match="alice would go below zero"):
        ledger.decide(Post({"alice": -101, "bob": 101}, "too much", "2026-01-02"))
    with pytest.raises(Rejected, match="no account"):
        ledger.decide(Post({"alice": -1, "carol": 1}, "who", "2026-01-02"))
    ledger = fold(ledger, ledger.decide(Post({"alice": -60, "bob": 60}, "rent", "2026-01-05")))
    assert ledger.balances == {"cash": -100, "alice": 40, "bob": 60}


def test_balance_as_of_a_date_counts_only_postings_booked_by_then():
    class R:
        def __init__(self, event):
            self.event = event

    history = [R(AccountOpened("cash", True)), R(AccountOpened("a", False)),
               R(Posted({"cash": -10, "a": 10}, "x", "2026-01-01")), R(Posted({"cash": -5, "a": 5}, "y", "2026-02-01"))]
    assert balance_as_of(history, "2026-01-15") == {"cash": -10, "a": 10}
    assert balance_as_of(history, "2026-02-01") == {"cash": -15, "a": 15}


def test_decoding_many_events_at_once_equals_decoding_each():
    """``decode_events`` (a projection's catch-up) gives what ``decode_event`` gives, event by event: sealed
    fields opened or forgotten, old schemas upcast, tampered values unreadable, and errors raised the same."""
    store = keys()
    values = [codec.encode_event("course/c1", 1, CourseOpened("Logic", 2), store),
              codec.encode_event("course/c1", 2, StudentEnrolled("s1", "Ada"), store),
              codec.encode_event("course/c1", 3, StudentEnrolled("s2", "Alan"), keys()),  # key elsewhere: forgotten
              json.dumps({"type": "StudentEnrolled", "schema": 1, "stream": "course/c1", "version": 4,
                          "data": {"student": "s3:Grace"}}).encode()]  # schema 1: upcast
    tampered = json.loads(values[1])
    tampered["data"]["name"]["sealed"] = "!!not base64!!"
    values.append(json.dumps(tampered).encode())
    many = codec.decode_events(values, store, 3, [10, 11, 12, 13, 14], [5, 6, 7, 8, 9])
    assert many == [codec.decode_event(v, store, 3, 10 + i, 5 + i) for i, v in enumerate(values)]
    assert [r.event.name for r in many[1:]] == ["Ada", FORGOTTEN, "Grace", FORGOTTEN]
    with pytest.raises(SchemaError, match="unknown event type"):
        codec.decode_events([b'{"type":"Nope","schema":1,"stream":"a/b","version":1,"data":{}}'], store, 0, [0], [0])
    with pytest.raises(SchemaError, match="not a stored event"):
        codec.decode_events([b"[1, 2]"], store, 0, [0], [0])
