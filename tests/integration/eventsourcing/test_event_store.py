"""Event sourcing on a real broker: the processor's decisions, replays, snapshots, projections, rebuilds,
read-your-writes, forgetting, and invariants across kill -9 of the processor."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer

from freshet.eventsourcing import (
    FORGOTTEN,
    CommandClient,
    CommandProcessor,
    CommandTimeout,
    Database,
    EventStore,
    ProjectionRunner,
    RebuildError,
    SchemaError,
    SubjectKeys,
    rebuild,
    wait_for,
)
from freshet.eventsourcing.examples import enrollment, ledger
from freshet.eventsourcing.examples.enrollment import Cancel, Enroll, OpenCourse, Roster, StudentEnrolled
from freshet.eventsourcing.examples.ledger import OpenAccount, Post
from freshet.local import BrokerProcess
from freshet.testing.polling import wait_for as wait_until
from freshet.testing.topics import read_to_end


def fresh(app, **changes):
    """The example under a name of the test's own (its own topics on the shared broker)."""
    return app.named(f"{app.name}-{uuid.uuid4().hex[:8]}", **changes)


class Running:
    """A processor in a thread of the test."""

    def __init__(self, app, bootstrap):
        self.processor = CommandProcessor(app, bootstrap)
        self.thread = threading.Thread(target=self.processor.run, daemon=True)
        self.thread.start()

    def stop(self):
        self.processor.stop()
        self.thread.join(30)


@pytest.fixture
def course_app(broker):
    app = fresh(enrollment.app, snapshot_every=5)
    app.create_topics(broker.bootstrap)
    running = Running(app, broker.bootstrap)
    yield app
    running.stop()


def test_commands_are_answered_and_replay_equals_the_processors_state(broker, course_app):
    app = course_app
    with CommandClient(app, broker.bootstrap) as client:
        assert client.execute("course/c1", OpenCourse("Streams", 3)).accepted
        ids = [client.send("course/c1", Enroll(f"s{i}", f"Student {i}")) for i in range(5)]
        answers = client.answers(ids)
        client.execute("course/c1", Cancel("s0"))
        again = client.execute("course/c1", OpenCourse("Again", 1))
        unknown = client.answer(client.send_raw("course/c2", "Enroll", {"student_id": "x", "name": "X"}))
    statuses = [answers[i].status for i in ids]
    assert statuses == ["accepted"] * 3 + ["rejected"] * 2  # in order: one decision at a time
    assert [answers[i].reason for i in ids[3:]] == ["course is full"] * 2
    assert (again.status, again.reason) == ("rejected", "course c1 is already open")
    assert (unknown.status, unknown.reason) == ("rejected", "course c2 is not open")
    with EventStore(app, broker.bootstrap) as store:
        history = store.history("course/c1")
        assert [r.version for r in history] == list(range(1, 8))  # opened, 3 enrolled, 2 refused, cancelled
        state = store.state("course/c1")
        assert state.enrolled == ["s1", "s2"] and state.version == 7
        assert store.state("course/c1", version=4).enrolled == ["s0", "s1", "s2"]
        from_snapshots, from_zero = store.replay(use_snapshots=True), store.replay(use_snapshots=False)
    assert {s: a.state() for s, a in from_snapshots.items()} == {s: a.state() for s, a in from_zero.items()}
    assert from_zero["course/c1"].state() == state.state()


def test_an_answer_carries_the_offset_of_its_events(broker, course_app):
    with CommandClient(course_app, broker.bootstrap) as client:
        opened = client.execute("course/c9", OpenCourse("Logs", 2))
        enrolled = client.execute("course/c9", Enroll("s1", "Ada"))
    with EventStore(course_app, broker.bootstrap) as store:
        history = store.history("course/c9")
    assert (opened.partition, opened.offset) == (history[0].partition, history[0].offset)
    assert (enrolled.offset, enrolled.version) == (history[1].offset, 2)


def test_append_with_an_expected_version_is_refused_on_conflict(broker, course_app):
    with CommandClient(course_app, broker.bootstrap) as client:
        first = client.answer(client.append("course/d1", [enrollment.CourseOpened("Direct", 2)], expected_version=0))
        stale = client.answer(client.append("course/d1", [StudentEnrolled("s1", "Ada")], expected_version=0))
        right = client.answer(client.append("course/d1", [StudentEnrolled("s1", "Ada")], expected_version=1))
        command = client.execute("course/d1", Enroll("s2", "Alan"), expected_version=1)
    assert first.accepted and right.accepted and right.version == 2
    assert (stale.status, stale.reason) == ("conflict", "course/d1 is at version 1, not 0")
    assert command.status == "conflict" and "at version 2, not 1" in command.reason
    with EventStore(course_app, broker.bootstrap) as store:
        assert store.state("course/d1").enrolled == ["s1"]


def test_the_commands_topic_holds_personal_fields_sealed_and_forgetting_shreds_them(broker, course_app):
    """Commands and direct appends carry personal fields sealed with the subject's key (keys the client makes
    are appended before the command); the processor opens them; after forgetting they read FORGOTTEN."""
    with CommandClient(course_app, broker.bootstrap) as client:
        assert client.execute("course/p1", OpenCourse("Privacy", 3)).accepted
        ids = client.send_many([("course/p1", "Enroll", {"student_id": "s1", "name": "Grace Hopper"}, None),
                                ("course/p1", "Enroll", {"student_id": "s2", "name": "Edsger Dijkstra"}, None)])
        assert all(a.accepted for a in client.answers(ids).values())
        appended = client.answer(client.append("course/p1", [StudentEnrolled("s3", "Barbara Liskov")], 3))
        assert appended.accepted, appended.reason
        with pytest.raises(SchemaError, match="no field 'nmae'"):  # one bad command: none of them is sent
            client.send_many([("course/p1", "Cancel", {"student_id": "s1"}, None),
                              ("course/p1", "Enroll", {"student_id": "s4", "nmae": "x"}, None)])
    stored = [value for _, value in read_to_end(broker.bootstrap, course_app.commands_topic, course_app.partitions)]
    assert len(stored) == 4
    assert not any(name in value for value in stored for name in (b"Grace", b"Edsger", b"Barbara"))
    with EventStore(course_app, broker.bootstrap) as store:
        assert [r.event.name for r in store.history("course/p1") if isinstance(r.event, StudentEnrolled)] == [
            "Grace Hopper", "Edsger Dijkstra", "Barbara Liskov"]
    keys = SubjectKeys(broker.bootstrap, course_app.keys_topic).load()
    assert keys.forget("s1") == 1  # the client's key, which the processor sealed the event with too
    opened = [course_app.codec.open_command(doc["type"], doc["data"], keys)["name"]
              for doc in map(json.loads, stored) if doc["type"] == "Enroll"]
    assert opened == [FORGOTTEN, "Edsger Dijkstra"]
    assert course_app.codec.open_appended(json.loads(stored[3])["append"][0], keys).name == "Barbara Liskov"
    keys.close()


def test_a_command_whose_key_is_behind_an_open_transaction_waits_for_it(broker, course_app):
    """The client appends a new subject's key before the command; a transaction left open on the keys topic
    hides it from read_committed readers. The processor waits until it has read the keys below the command's
    ``keys_at`` instead of taking the key for forgotten (which would record the name as <forgotten>)."""
    hanging = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"hang-{uuid.uuid4().hex[:8]}",
                        "log_level": 0})
    hanging.init_transactions(30)
    hanging.begin_transaction()
    hanging.produce(course_app.keys_topic, b"k" * 32, b"nobody/0123456789abcdef", partition=0)
    assert hanging.flush(30) == 0
    with CommandClient(course_app, broker.bootstrap) as client:
        assert client.execute("course/h1", OpenCourse("Radio", 3)).accepted
        command_id = client.send("course/h1", Enroll("s9", "Hedy Lamarr"))
        with pytest.raises(CommandTimeout):  # its key cannot be read while the transaction is open
            client.answer(command_id, timeout=3)
        hanging.commit_transaction(30)
        answer = client.answer(command_id, timeout=60)
    assert answer.accepted, answer.reason
    with EventStore(course_app, broker.bootstrap) as store:
        assert [r.event.name for r in store.history("course/h1") if isinstance(r.event, StudentEnrolled)] == [
            "Hedy Lamarr"]


def test_a_command_waiting_for_its_keys_is_decided_later_not_refused_and_the_processor_stays_stoppable(broker):
    """A transaction open on the keys topic for longer than the processor waits in one round: the command is
    put back (its offset not committed) and decided once the keys are readable, not rejected for a cause that
    passes; meanwhile the processor stops when asked, and the next one decides the command."""
    app = fresh(enrollment.app)
    app.create_topics(broker.bootstrap)
    hanging = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"hang-{uuid.uuid4().hex[:8]}",
                        "log_level": 0})
    hanging.init_transactions(30)
    first = CommandProcessor(app, broker.bootstrap, keys_wait_s=0.3)
    thread = threading.Thread(target=first.run, daemon=True)
    thread.start()
    with CommandClient(app, broker.bootstrap) as client:
        assert client.execute("course/w1", OpenCourse("Waiting", 3), timeout=60).accepted
        hanging.begin_transaction()
        hanging.produce(app.keys_topic, b"k" * 32, b"nobody/0123456789abcdef", partition=0)
        assert hanging.flush(30) == 0
        command_id = client.send("course/w1", Enroll("s9", "Hedy Lamarr"))
        with pytest.raises(CommandTimeout):  # sent (its key acknowledged), not answered: the key is not readable
            client.answer(command_id, timeout=3)
        wait_until(lambda: first.stats.deferred >= 3, 120, "the command put back three times")
        first.stop()
        thread.join(60)
        assert not thread.is_alive(), "the processor did not stop while a command waited for its keys"
        assert first.stats.rejected == 0
        second = Running(app, broker.bootstrap)
        try:
            hanging.commit_transaction(30)
            answer = client.answer(command_id, timeout=120)
        finally:
            second.stop()
    assert answer.accepted, answer.reason
    with EventStore(app, broker.bootstrap) as store:
        assert [r.event.name for r in store.history("course/w1") if isinstance(r.event, StudentEnrolled)] == [
            "Hedy Lamarr"]


def test_a_command_whose_keys_at_lies_past_the_keys_topic_is_refused_at_once(broker, course_app):
    """Keys that were never written (``keys_at`` past every record of the keys topic, open transactions
    included) never become readable: the command is refused, and the commands after it are decided."""
    from freshet.eventsourcing.processor import encode_command

    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    with CommandClient(course_app, broker.bootstrap) as client:
        assert client.execute("course/p1", OpenCourse("Past", 3), timeout=60).accepted
        producer.produce(course_app.commands_topic, encode_command("past-end", "Cancel", {"student_id": "s1"},
                                                                   keys_at=1_000_000),
                         b"course/p1", partition=course_app.partition_of("course/p1"))
        assert producer.flush(30) == 0
        after = client.execute("course/p1", Enroll("s2", "Grace Hopper"), timeout=60)
    assert after.accepted, after.reason
    answers = [a for _, v in read_to_end(broker.bootstrap, course_app.replies_topic, course_app.partitions)
               for a in json.loads(v)["answers"] if a["id"] == "past-end"]
    assert len(answers) == 1 and answers[0]["status"] == "rejected"
    assert "keys_at 1000000" in answers[0]["reason"] and "never written" in answers[0]["reason"]


def test_close_says_which_commands_were_not_sent_instead_of_dropping_them(own_broker):
    """Commands still held for their keys, or not acknowledged, when the client closes: close() raises naming
    them (it used to return as if they had been sent)."""
    from freshet.client import ClientError

    app = fresh(enrollment.app)
    app.create_topics(own_broker.bootstrap)
    client = CommandClient(app, own_broker.bootstrap)
    client.send("course/c1", Enroll("s1", "Ada Lovelace"))  # reads the keys topic, appends s1's key
    assert client.producer.flush(30) == 0
    own_broker.kill()
    client.send("course/c1", Cancel("s1"))  # appended at once: never acknowledged
    client.send("course/c1", Enroll("s2", "Grace Hopper"))  # held until its new key is acknowledged: never
    with pytest.raises(ClientError) as refused:
        client.close(timeout=2)
    said = str(refused.value)
    assert said.startswith("commands were not sent: 1 held: the keys of their personal fields were not "
                           f"acknowledged by {app.keys_topic}"), said
    assert "not acknowledged in 2 s" in said and len(said.splitlines()) == 1


def test_a_command_is_checked_once_before_it_is_sent(broker, monkeypatch):
    """send_many builds each command once from its fields (every one before any is sent); sealing does not
    check them again, and send() of a command object checks nothing more."""
    from freshet.eventsourcing import events

    app = fresh(enrollment.app)
    app.create_topics(broker.bootstrap)
    checks = []
    command_from, checked_fields = app.codec.command_from, events._checked_fields
    monkeypatch.setattr(app.codec, "command_from", lambda *a, **k: checks.append("built") or command_from(*a, **k))
    monkeypatch.setattr(events, "_checked_fields", lambda *a: checks.append("fields") or checked_fields(*a))
    with CommandClient(app, broker.bootstrap) as client:
        client.send_many([(f"course/k{i}", "Enroll", {"student_id": f"s{i}", "name": f"Student {i}"}, None)
                          for i in range(5)])
        assert checks == ["built"] * 5
        client.send("course/k0", Cancel("s0"))
        assert checks == ["built"] * 5
        with pytest.raises(SchemaError, match="has no field 'nme'"):
            client.send_many([("course/k1", "Cancel", {"student_id": "s1"}, None),
                              ("course/k1", "Enroll", {"student_id": "s1", "nme": "x"}, None)])
    stored = read_to_end(broker.bootstrap, app.commands_topic, app.partitions)
    assert len(stored) == 6  # the refused pair sent nothing


def test_a_command_sealed_with_a_key_the_processor_made_is_decided(broker, course_app):
    """A key the processor made in a transaction is followed by its commit marker: a client that read the keys
    topic to its end sends ``keys_at`` past the marker, and the processor reads that far too (not waiting for a
    record that never comes)."""
    from freshet.eventsourcing.processor import encode_command

    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    with CommandClient(course_app, broker.bootstrap) as client:
        assert client.execute("course/m1", OpenCourse("Markers", 3)).accepted
        assert client.execute("course/m2", OpenCourse("Markers", 3)).accepted
        # a command appended without a client (plain fields, as before sealing): the processor makes s7's key
        producer.produce(course_app.commands_topic, encode_command("raw-1", "Enroll", {"student_id": "s7",
                         "name": "Ken Thompson"}), b"course/m1", partition=course_app.partition_of("course/m1"))
        assert producer.flush(30) == 0
        wait_until(lambda: any(k.startswith(b"s7/") for k, _ in read_to_end(broker.bootstrap, course_app.keys_topic,
                                                                             1)), 60, "the processor's key for s7")
    with CommandClient(course_app, broker.bootstrap) as client:  # reads the keys to their end, past the marker
        answer = client.execute("course/m2", Enroll("s7", "Ken Thompson"), timeout=60)
    assert answer.accepted, answer.reason
    stored = [json.loads(v) for _, v in read_to_end(broker.bootstrap, course_app.commands_topic,
                                                    course_app.partitions)]
    assert [doc["data"]["name"]["key"].split("/")[0] for doc in stored if doc["id"] != "raw-1" and
            doc["type"] == "Enroll"] == ["s7"]  # sealed with the processor's key
    with EventStore(course_app, broker.bootstrap) as store:
        assert [r.event.name for r in store.history("course/m2") if isinstance(r.event, StudentEnrolled)] == [
            "Ken Thompson"]


def test_old_events_in_the_log_are_upcast_on_every_read(broker):
    app = fresh(enrollment.app)
    app.create_topics(broker.bootstrap)
    partition = app.partition_of("course/old")
    old = [{"type": "CourseOpened", "schema": 1, "stream": "course/old", "version": 1,
            "data": {"title": "Legacy", "capacity": 5}},
           {"type": "StudentEnrolled", "schema": 1, "stream": "course/old", "version": 2,
            "data": {"student": "s1:Grace Hopper"}}]
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for doc in old:  # written by an older version of the code, before the processor existed
        producer.produce(app.events_topic, json.dumps(doc).encode(), b"course/old", partition=partition)
    producer.flush(10)
    with EventStore(app, broker.bootstrap) as store:
        assert [r.event for r in store.history("course/old")][-1] == StudentEnrolled("s1", "Grace Hopper")
    running = Running(app, broker.bootstrap)  # the processor's replay upcasts them too
    try:
        with CommandClient(app, broker.bootstrap) as client:
            answer = client.execute("course/old", Enroll("s1", "Grace Hopper"))
        assert (answer.status, answer.reason, answer.version) == ("rejected", "s1 is already enrolled", 2)
    finally:
        running.stop()


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_a_projection_rebuilt_from_zero_equals_the_live_one_and_waits_for_your_write(broker, postgres, course_app,
                                                                                    tmp_path, database):
    app = course_app
    url = f"sqlite:{tmp_path / 'views.db'}" if database == "sqlite" else _pg_database(postgres)
    live = ProjectionRunner(app, Roster, url, broker.bootstrap)
    runner = threading.Thread(target=live.run, daemon=True)
    runner.start()
    try:
        with CommandClient(app, broker.bootstrap) as client:
            for c in range(3):
                client.execute(f"course/p{c}", OpenCourse(f"Course {c}", 4))
            rng = random.Random(5)
            ids = [client.send(f"course/p{rng.randrange(3)}", Enroll(f"s{i}", f"Name {i}")) for i in range(20)]
            client.answers(ids)
            mine = client.execute("course/p1", Cancel(client_first_enrolled(app, broker, "course/p1")))
        wait_for(url, "roster", mine.partition, mine.offset, app.events_topic, timeout_s=30)  # read your write
        with EventStore(app, broker.bootstrap) as store:
            enrolled = {c: store.state(f"course/p{c}").enrolled for c in range(3)}
        db = Database(url)
        assert db.execute("SELECT enrolled FROM roster_courses WHERE course = 'p1'") == [(len(enrolled[1]),)]
        before = (db.execute("SELECT * FROM roster_courses ORDER BY course"),
                  db.execute("SELECT * FROM roster_students ORDER BY course, student_id"))
        # the roster is keyed by aggregate: by default its rebuild splits the partitions over processes
        for workers, expected_generation in ((None, 2), (1, 3), (3, 4)):
            generation, applied = rebuild(app, Roster, url, broker.bootstrap, workers=workers)
            assert generation == expected_generation and applied == 3 + 20 + 1
            after = (db.execute("SELECT * FROM roster_courses ORDER BY course"),
                     db.execute("SELECT * FROM roster_students ORDER BY course, student_id"))
            assert after == before
        assert before[1] == sorted((f"p{c}", s, f"Name {s[1:]}") for c in range(3) for s in enrolled[c])
        with CommandClient(app, broker.bootstrap) as client:  # the live runner follows the new generation
            more = client.execute("course/p1", Enroll("s-new", "Newcomer"))
        wait_for(url, "roster", more.partition, more.offset, app.events_topic, timeout_s=30)
        assert db.execute("SELECT name FROM roster_students WHERE student_id = 's-new'") == [("Newcomer",)]
        db.close()
    finally:
        live.stop()
        runner.join(10)
        live.close()


def test_a_rebuild_reads_committed_events_only_and_the_live_runner_takes_the_rest(broker, tmp_path):
    """A rebuild applies what the log holds in bulk (the columnar reader, read_committed): an aborted
    transaction's events are skipped, an open one's are not read until it commits, and the runner that follows
    takes them from where the rebuild stopped."""
    from freshet.eventsourcing.examples.enrollment import CourseOpened

    app = fresh(enrollment.app)
    app.create_topics(broker.bootstrap)
    keys = SubjectKeys(broker.bootstrap, app.keys_topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"t-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(10)

    def transaction(version, event):
        producer.begin_transaction()
        stream = "course/t1"
        partition = app.partition_of(stream)
        producer.produce(app.events_topic, app.codec.encode_event(stream, version, event, keys), stream.encode(),
                         partition=partition)
        for ref, key in keys.take_created():
            producer.produce(app.keys_topic, key, ref.encode(), partition=0)
        producer.flush(10)

    transaction(1, CourseOpened("Logic", 3))
    producer.commit_transaction(10)
    transaction(2, StudentEnrolled("s1", "Ada"))
    producer.commit_transaction(10)
    transaction(3, StudentEnrolled("s2", "Aborted"))
    producer.abort_transaction(10)
    transaction(3, StudentEnrolled("s3", "Grace"))  # left open while the rebuild runs
    url = f"sqlite:{tmp_path / 'views.db'}"
    _, applied = rebuild(app, Roster, url, broker.bootstrap, timeout_s=60)
    db = Database(url)
    assert applied == 2
    assert db.execute("SELECT student_id, name FROM roster_students") == [("s1", "Ada")]
    producer.commit_transaction(10)
    live = ProjectionRunner(app, Roster, url, broker.bootstrap)
    try:
        assert live.run(until_caught_up=True, timeout_s=60) == 1
    finally:
        live.close()
    assert db.execute("SELECT student_id, name FROM roster_students ORDER BY student_id") == [("s1", "Ada"),
                                                                                             ("s3", "Grace")]
    assert db.execute("SELECT enrolled FROM roster_courses") == [(2,)]
    db.close()


def client_first_enrolled(app, broker, stream):
    with EventStore(app, broker.bootstrap) as store:
        return store.state(stream).enrolled[0]


def _pg_database(postgres):
    from freshet.testing.postgres import execute_outside_transaction

    name = f"es_{uuid.uuid4().hex[:8]}"
    execute_outside_transaction(postgres.dsn, f"CREATE DATABASE {name}")
    return postgres.dsn.replace("dbname=postgres", f"dbname={name}") if "dbname=" in postgres.dsn else \
        postgres.dsn.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture
def cleaning_broker(tmp_path):
    """A broker of the test's own whose log cleaner runs every 200 ms."""
    with BrokerProcess(data_dir=str(tmp_path / "data"), extra_args=["--cleaner-interval-ms", "200"]) as b:
        yield b


def test_forget_makes_a_subject_unreadable_in_replays_rebuilds_and_the_log_itself(cleaning_broker, tmp_path):
    own_broker = cleaning_broker
    app = fresh(enrollment.app, compacted_segment_ms=300)
    app.create_topics(own_broker.bootstrap)
    running = Running(app, own_broker.bootstrap)
    url = f"sqlite:{tmp_path / 'views.db'}"
    try:
        with CommandClient(app, own_broker.bootstrap) as client:
            client.execute("course/f1", OpenCourse("Privacy", 5))
            client.execute("course/f1", Enroll("s1", "Ada Lovelace"))
            client.execute("course/f1", Enroll("s2", "Alan Turing"))
        live = ProjectionRunner(app, Roster, url, own_broker.bootstrap)
        live.run(until_caught_up=True, timeout_s=30)
        old_key = next(k for k, v in read_to_end(own_broker.bootstrap, app.keys_topic, 1) if k.startswith(b"s1/"))
        keys = SubjectKeys(own_broker.bootstrap, app.keys_topic).load()
        assert keys.forget("s1") == 1 and keys.forget("s1") == 0
        keys.close()
        live.run(until_caught_up=True, timeout_s=30)  # the live projection hears of it at once
        db = Database(url)
        assert db.execute("SELECT student_id, name FROM roster_students ORDER BY student_id") == [
            ("s1", FORGOTTEN), ("s2", "Alan Turing")]
        live.close()
        rebuild(app, Roster, url, own_broker.bootstrap)
        assert db.execute("SELECT student_id, name FROM roster_students ORDER BY student_id") == [
            ("s1", FORGOTTEN), ("s2", "Alan Turing")]
        with EventStore(app, own_broker.bootstrap) as store:
            names = [r.event.name for r in store.history("course/f1") if isinstance(r.event, StudentEnrolled)]
        assert names == [FORGOTTEN, "Alan Turing"]
        with CommandClient(app, own_broker.bootstrap) as client:  # s1 comes back: a new key, readable again
            client.execute("course/f2", OpenCourse("Again", 5))
            client.execute("course/f2", Enroll("s1", "Ada, again"))
        with EventStore(app, own_broker.bootstrap) as store:
            assert [r.event.name for r in store.history("course/f2") if isinstance(r.event, StudentEnrolled)] == [
                "Ada, again"]
        new_key = [k for k, v in read_to_end(own_broker.bootstrap, app.keys_topic, 1)
                   if k.startswith(b"s1/") and v is not None][-1]
        assert old_key != new_key
        time.sleep(0.4)  # past segment.ms: the next key appended rolls the segment holding the tombstone
        with CommandClient(app, own_broker.bootstrap) as client:
            client.execute("course/f2", Enroll("s3", "Barbara Liskov"))

        def old_key_gone_from_the_log() -> bool:  # compaction removed the key's bytes, not only hid them
            return old_key not in {k for k, _ in read_to_end(own_broker.bootstrap, app.keys_topic, 1)}

        wait_until(old_key_gone_from_the_log, 60, "the forgotten key to be compacted out of the keys topic", 0.5)
        assert new_key in {k for k, v in read_to_end(own_broker.bootstrap, app.keys_topic, 1) if v is not None}
    finally:
        running.stop()


def test_invariants_hold_across_kill_9_of_the_processors(broker):
    """Many clients race for places and for one account's money while the processors are killed -9 three
    times: every command is answered exactly once, no course is ever over capacity, no balance below zero,
    and the log holds exactly the events of the accepted commands."""
    courses, accounts = fresh(enrollment.app), fresh(ledger.app)
    for app in (courses, accounts):
        app.create_topics(broker.bootstrap)
    capacity = {f"course/k{c}": 6 for c in range(6)}

    def processors():  # static members, one id a slot: a restart takes the killed one's place at once
        return [subprocess.Popen([sys.executable, "-m", "freshet.cli.main", "es", "process", name, "--name",
                                  app.name, "--instance-id", f"{app.name}-slot-0", "-b", broker.bootstrap],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for name, app in (("enrollment", courses), ("ledger", accounts))]

    answered = [0]
    outcomes: list[tuple] = []
    lock = threading.Lock()

    def enrolling(seed):
        rng = random.Random(seed)
        with CommandClient(courses, broker.bootstrap) as client:
            for round_ in range(8):
                sent = []
                for i in range(10):
                    student = f"s{seed}-{round_}-{i}"
                    stream = rng.choice(sorted(capacity))
                    sent.append((client.send(stream, Enroll(student, student)), stream, "enroll", student))
                    if rng.random() < 0.3:  # some change their mind at once
                        sent.append((client.send(stream, Cancel(student)), stream, "cancel", student))
                got = client.answers([s[0] for s in sent], timeout=180)
                with lock:
                    outcomes.extend((got[i], stream, kind, who) for i, stream, kind, who in sent)
                    answered[0] += len(sent)

    def spending(seed):
        rng = random.Random(seed)
        with CommandClient(accounts, broker.bootstrap) as client:
            for _ in range(8):
                ids = [client.send("ledger/book", Post({"shared": -(amount := rng.randint(10, 60)),
                                                        rng.choice(["alice", "bob"]): amount}, "spend",
                                                       "2026-01-02")) for _ in range(10)]
                got = client.answers(ids, timeout=180)
                with lock:
                    outcomes.extend((got[i], "ledger/book", "post", None) for i in ids)
                    answered[0] += len(ids)

    running = processors()
    with CommandClient(courses, broker.bootstrap) as client:
        assert all(a.accepted for a in client.answers([client.send(s, OpenCourse(s, n))
                                                       for s, n in capacity.items()], 60).values())
    with CommandClient(accounts, broker.bootstrap) as client:
        opening = [client.send("ledger/book", c) for c in (OpenAccount("cash", True), OpenAccount("shared"),
                                                           OpenAccount("alice"), OpenAccount("bob"))]
        opening.append(client.send("ledger/book", Post({"cash": -1000, "shared": 1000}, "opening", "2026-01-01")))
        assert all(a.accepted for a in client.answers(opening, 60).values())
    threads = [threading.Thread(target=enrolling, args=(s,)) for s in (1, 2)] + [
        threading.Thread(target=spending, args=(s,)) for s in (3, 4)]
    for t in threads:
        t.start()
    total = 2 * 8 * 10 * 1.3 + 2 * 8 * 10
    try:
        for fraction in (0.15, 0.35, 0.6):
            wait_until(lambda f=fraction: answered[0] >= f * total, 180, f"{fraction:.0%} of the answers", 0.05)
            for p in running:
                p.send_signal(signal.SIGKILL)
                p.wait()
            running = processors()
        for t in threads:
            t.join(300)
        assert not any(t.is_alive() for t in threads), "a client never got all its answers"
    finally:
        for p in running:
            p.send_signal(signal.SIGTERM)
            p.wait(30)

    # every command answered exactly once, in the log as in the clients
    for app in (courses, accounts):
        ids = [a["id"] for _, v in read_to_end(broker.bootstrap, app.replies_topic, app.partitions)
               for a in json.loads(v)["answers"]]
        assert len(ids) == len(set(ids)), f"{app.name}: a command was answered twice"
    with EventStore(courses, broker.bootstrap) as store:
        for stream, places in capacity.items():
            history, enrolled = store.history(stream), set()
            assert [r.version for r in history] == list(range(1, len(history) + 1)), "a gap or a duplicate"
            for r in history:
                if type(r.event).__name__ == "StudentEnrolled":
                    enrolled.add(r.event.student_id)
                elif type(r.event).__name__ == "EnrollmentCancelled":
                    enrolled.remove(r.event.student_id)
                assert len(enrolled) <= places, f"{stream} oversold at version {r.version}"
            accepted = [o for o in outcomes if o[1] == stream and o[0].accepted]
            expected = {who for a, _, kind, who in accepted if kind == "enroll"} - {
                who for a, _, kind, who in accepted if kind == "cancel"}
            assert enrolled == expected
            assert len(history) == 1 + sum(o[0].events for o in outcomes if o[1] == stream)
    with EventStore(accounts, broker.bootstrap) as store:
        book, balances = store.history("ledger/book"), {}
        for r in book:
            if type(r.event).__name__ == "AccountOpened":
                balances[r.event.account] = 0
            else:
                for account, amount in r.event.entries.items():
                    balances[account] += amount
                assert balances["shared"] >= 0 and balances["alice"] >= 0 and balances["bob"] >= 0
        posts = [o for o in outcomes if o[1] == "ledger/book"]
        assert len(book) == 5 + sum(1 for o in posts if o[0].accepted)
        assert sum(1 for o in posts if not o[0].accepted) > 0  # the money ran out: later posts were refused
        assert store.state("ledger/book").balances == balances


def test_two_processors_with_ids_of_their_own_share_the_partitions(broker):
    from freshet.client.groups import GroupAdmin

    app = fresh(enrollment.app)
    app.create_topics(broker.bootstrap)
    processors = [CommandProcessor(app, broker.bootstrap, f"{app.name}.processor-{i}") for i in range(2)]
    threads = [threading.Thread(target=p.run, daemon=True) for p in processors]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(GroupAdmin(broker.bootstrap).describe(f"{app.name}.processor").members) == 2
                   and all(p.aggregates or p.stats.rebuilds for p in processors), 60, "both processors in the group")
        with CommandClient(app, broker.bootstrap) as client:
            opened = client.answers([client.send(f"course/t{c}", OpenCourse(f"T{c}", 2)) for c in range(8)], 60)
            enrolled = client.answers([client.send(f"course/t{i % 8}", Enroll(f"s{i}", f"N{i}"))
                                       for i in range(40)], 60)
        assert all(a.accepted for a in opened.values())
        assert sum(a.accepted for a in enrolled.values()) == 16  # two places in each of eight courses
        assert all(p.stats.commands for p in processors), "each decided the commands of its partitions"
    finally:
        for p in processors:
            p.stop()
        for t in threads:
            t.join(30)
    with EventStore(app, broker.bootstrap) as store:
        assert all(len(store.state(f"course/t{c}").enrolled) == 2 for c in range(8))


def test_a_rebuild_worker_that_fails_fails_the_rebuild_and_nothing_is_swapped(broker, course_app, tmp_path):
    """A projection whose handler raises in a rebuild's forked worker: the rebuild raises, and readers keep the
    generation they had."""
    app = course_app
    with CommandClient(app, broker.bootstrap) as client:
        for c in range(4):
            client.execute(f"course/f{c}", OpenCourse(f"Course {c}", 2))
    url = f"sqlite:{tmp_path / 'views.db'}"
    generation, applied = rebuild(app, Roster, url, broker.bootstrap, workers=2)
    assert (generation, applied) == (1, 4)

    class Failing(Roster):
        def handle_batch(self, events, db):
            raise ValueError("a handler's bug")

    with pytest.raises(RebuildError, match="rebuild workers failed"):
        rebuild(app, Failing, url, broker.bootstrap, workers=2)
    db = Database(url)
    assert db.current_generation("roster") == 1
    assert len(db.execute("SELECT * FROM roster_courses")) == 4
    db.close()


def test_the_processors_consumer_is_a_static_member_with_its_instance_id():
    from freshet.eventsourcing.processor import processor_consumer_config

    app = fresh(enrollment.app)
    config = processor_consumer_config(app, "127.0.0.1:9", "course-slot-1")
    assert config["group.instance.id"] == "course-slot-1" and config["group.id"] == f"{app.name}.processor"
    assert "group.instance.id" not in processor_consumer_config(app, "127.0.0.1:9")  # dynamic by default
    for bad, says in (("", "must not be empty"), ("..", "cannot be"), ("a b", "other than ASCII"),
                      ("x" * 250, "at most 249")):
        with pytest.raises(ValueError, match=says):
            processor_consumer_config(app, "127.0.0.1:9", bad)
        with pytest.raises(ValueError, match=says):  # before it announces the app or opens anything
            CommandProcessor(app, "127.0.0.1:9", instance_id=bad)
