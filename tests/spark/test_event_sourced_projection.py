"""A projection of an event-sourced application as a Spark pipeline (`freshet run course-enrollment`): the
same numbers as the Python projection, events of an aborted transaction never counted, personal fields
never seen."""

import json
import threading
import uuid

from confluent_kafka import Producer

from freshet.eventsourcing import CommandClient, CommandProcessor, Database, ProjectionRunner
from freshet.eventsourcing.examples import enrollment
from freshet.eventsourcing.examples.enrollment import Cancel, Enroll, OpenCourse, Roster
from freshet.pipelines import event_sourced
from freshet.testing.postgres import rows as pg_rows
from freshet.pipelines.runner import PipelineSpec, start


def test_course_enrollment_in_spark_equals_the_roster_projection(spark, broker, postgres, tmp_path):
    app = enrollment.app.named(f"spark-es-{uuid.uuid4().hex[:6]}")
    app.create_topics(broker.bootstrap)
    processor = CommandProcessor(app, broker.bootstrap)
    thread = threading.Thread(target=processor.run, daemon=True)
    thread.start()
    try:
        with CommandClient(app, broker.bootstrap) as commands:
            commands.answers([commands.send(f"course/c{c}", OpenCourse(f"Course {c}", 3 + c)) for c in range(4)])
            commands.answers([commands.send(f"course/c{i % 4}", Enroll(f"s{i}", f"Name {i}")) for i in range(30)])
            commands.answers([commands.send(f"course/c{i % 4}", Cancel(f"s{i}")) for i in range(0, 30, 7)])
    finally:
        processor.stop()
        thread.join(30)
    # an event appended in a transaction that aborted: read_committed readers never see it
    aborted = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"abort-{uuid.uuid4()}"})
    aborted.init_transactions(30)
    aborted.begin_transaction()
    ghost = {"type": "StudentEnrolled", "schema": 2, "stream": "course/c0", "version": 99,
             "data": {"student_id": "ghost", "name": "x"}}
    aborted.produce(app.events_topic, json.dumps(ghost).encode(), b"course/c0",
                    partition=app.partition_of("course/c0"))
    aborted.flush(10)
    aborted.abort_transaction(30)

    table = f"enrollment_{uuid.uuid4().hex[:6]}"
    query = start(spark, PipelineSpec("course-enrollment", app.events_topic, f"postgres:{table}", broker.bootstrap,
                                      str(tmp_path / "ck"), available_now=True, pg_dsn=postgres.dsn))
    query.awaitTermination(180)
    in_spark = pg_rows(postgres.dsn, f"SELECT course, title, capacity, enrolled FROM {table} ORDER BY course")
    refused = dict(pg_rows(postgres.dsn, f"SELECT course, refused FROM {table}"))

    url = f"sqlite:{tmp_path / 'roster.db'}"
    runner = ProjectionRunner(app, Roster, url, broker.bootstrap)
    runner.run(until_caught_up=True, timeout_s=60)
    runner.close()
    db = Database(url)
    in_python = db.execute("SELECT course, title, capacity, enrolled FROM roster_courses ORDER BY course")
    db.close()
    assert in_spark == [tuple(r) for r in in_python] and len(in_spark) == 4
    # 30 enrollments over four courses of 3..6 places: 7 or 8 asked for each, the rest refused
    assert refused == {"c0": 8 - 3, "c1": 8 - 4, "c2": 7 - 5, "c3": 7 - 6}


def test_events_envelope_keeps_personal_fields_sealed(spark):
    stored = {"type": "StudentEnrolled", "schema": 2, "stream": "course/c1", "version": 2,
              "data": {"student_id": "s1", "name": {"key": "s1/abc", "nonce": "n", "ct": "c"}}}
    raw = spark.createDataFrame([(json.dumps(stored).encode(), 0, 5, None), (b"not json", 0, 6, None)],
                                "value binary, partition int, offset long, timestamp timestamp")
    [row] = event_sourced.events(raw).collect()
    assert (row.aggregate, row.aggregate_id, row.version, row.event_type, row.offset) == (
        "course", "c1", 2, "StudentEnrolled", 5)
    assert json.loads(row.data)["name"] == {"key": "s1/abc", "nonce": "n", "ct": "c"}
