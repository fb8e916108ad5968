"""``freshet es`` and ``freshet demo enrollment`` as a user types them."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import uuid

from freshet.testing.cli import freshet, freshet_argv, one_line_error


def test_commands_events_state_and_forget_from_the_command_line(broker, tmp_path):
    name = f"cli-{uuid.uuid4().hex[:8]}"
    processor = subprocess.Popen(freshet_argv("es", "process", "enrollment", "--name", name, "--bootstrap",
                                              broker.bootstrap), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
    try:
        opened = freshet(broker, "es", "command", "enrollment", "course/c1", "OpenCourse",
                         '{"title": "Streams", "capacity": 1}', "--name", name)
        assert opened.returncode == 0, opened.stderr
        assert opened.stdout.startswith("accepted: course/c1 is at version 1 (events up to offset 0 of partition")
        enrolled = freshet(broker, "es", "command", "enrollment", "course/c1", "Enroll",
                           '{"student_id": "s1", "name": "Ada"}', "--name", name)
        assert enrolled.returncode == 0, enrolled.stderr
        full = freshet(broker, "es", "command", "enrollment", "course/c1", "Enroll",
                       '{"student_id": "s2", "name": "Alan"}', "--name", name)
        assert full.returncode == 1 and full.stderr.startswith("rejected: course is full")
        stale = freshet(broker, "es", "command", "enrollment", "course/c1", "Cancel", '{"student_id": "s1"}',
                        "--expected-version", "1", "--name", name)
        assert stale.returncode == 1 and stale.stderr.strip().startswith(
            "conflict: course/c1 is at version 3, not 1")

        for args, message in [
            (("es", "command", "enrollment", "course/c1", "Enroll", "{not json"), "error: FIELDS is not JSON"),
            (("es", "command", "enrollment", "course/c1", "Teleport", "{}"), "error: unknown command 'Teleport'"),
            (("es", "command", "enrollment", "room/1", "Enroll", "{}"), "error: 'room/1' names no aggregate"),
            (("es", "state", "nope"), "error: no application 'nope'"),
            (("es", "forget", "enrollment", "nobody"), "error: "),
        ]:
            r = freshet(broker, *args, "--name", name) if args[1] != "state" else freshet(broker, *args, "x/1")
            assert r.returncode == 1 and r.stderr.startswith(message), (args, r.stderr)
            assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr

        state = freshet(broker, "es", "state", "enrollment", "course/c1", "--name", name)
        assert state.returncode == 0, state.stderr
        assert json.loads(state.stdout) == {"stream": "course/c1", "version": 3, "title": "Streams",
                                            "capacity": 1, "enrolled": ["s1"]}
        at_two = freshet(broker, "es", "state", "enrollment", "course/c1", "--version", "1", "--name", name)
        assert json.loads(at_two.stdout)["enrolled"] == []
        listed = freshet(broker, "es", "commands", "enrollment", "--name", name).stdout.splitlines()
        assert [line.split("\t")[5] for line in listed] == ["accepted", "accepted", "rejected", "conflict"]

        forgot = freshet(broker, "es", "forget", "enrollment", "s1", "--name", name)
        assert forgot.returncode == 0 and forgot.stdout.startswith("forgot s1: 1 key(s) tombstoned")
        events = freshet(broker, "es", "events", "enrollment", "--stream", "course/c1", "--name", name)
        lines = events.stdout.splitlines()
        assert [line.split("\t")[3] for line in lines] == ["CourseOpened", "StudentEnrolled", "EnrollmentRefused"]
        assert '"name": "<forgotten>"' in lines[1] and '"name": "Alan"' in lines[2]

        db = f"sqlite:{tmp_path / 'views.db'}"
        built = freshet(broker, "es", "rebuild", "enrollment", "roster", "--db", db, "--name", name)
        assert built.returncode == 0 and "generation 1 built from 3 events" in built.stdout
        split = freshet(broker, "es", "rebuild", "enrollment", "roster", "--db", db, "--name", name, "--workers", "3")
        assert split.returncode == 0 and "generation 2 built from 3 events" in split.stdout
        bad = freshet(broker, "es", "rebuild", "enrollment", "roster", "--db", db, "--name", name, "--workers", "0")
        assert bad.returncode == 1 and bad.stderr.strip() == "error: workers must be 1 or more"
        unknown = freshet(broker, "es", "rebuild", "enrollment", "nope", "--db", db, "--name", name)
        assert unknown.returncode == 1 and "has no projection 'nope'" in unknown.stderr
    finally:
        processor.send_signal(signal.SIGINT)
        try:
            _, err = processor.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            processor.kill()  # never outlive the test
            processor.communicate()
            raise
    assert "4 commands: 2 accepted, 2 refused" in err, err


def test_demo_enrollment_tells_the_story_and_checks_it(tmp_path):
    r = subprocess.run([sys.executable, "-m", "freshet.cli.main", "demo", "enrollment", "--data-dir",
                        str(tmp_path / "demo")], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "COLUMNS": "120"})
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    for step in ("1. the log", "2. the processor", "3. the race", "4. a projection", "5. read your writes",
                 "6. a projection added later", "7. forgetting", "8. replay"):
        assert step in out
    assert "shows Latecomer" in out and "their name reads <forgotten>" in out
    assert "none over capacity; equal to the processor's live state: True" in out


class Processor:
    """``freshet es process`` of an application of the test's own name, in a process of its own."""

    def __init__(self, bootstrap, name):
        self.proc = subprocess.Popen(freshet_argv("es", "process", "enrollment", "--name", name, "--bootstrap",
                                                  bootstrap), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.communicate(timeout=60)[1]
        except subprocess.TimeoutExpired:
            self.proc.kill()  # never outlive the test
            self.proc.communicate()
            raise


def test_forgetting_a_student_leaves_their_name_nowhere_in_the_brokers_files(own_broker):
    """Issue 45 item 1: the commands topic held personal fields in plain text; now they are sealed with the
    subject's key, so after `es forget` no file of the broker holds the name and `es commands` shows
    <forgotten> (the other student's name still reads)."""
    name = f"forget-{uuid.uuid4().hex[:8]}"
    processor = Processor(own_broker.bootstrap, name)
    try:
        for command, fields, status in [("OpenCourse", '{"title": "Streams", "capacity": 1}', 0),
                                        ("Enroll", '{"student_id": "s3", "name": "Grace Hopper"}', 0),
                                        ("Enroll", '{"student_id": "s4", "name": "Edsger Dijkstra"}', 1)]:
            r = freshet(own_broker, "es", "command", "enrollment", "course/c1", command, fields, "--name", name)
            assert r.returncode == status and "Traceback" not in r.stderr, r.stderr
        forgot = freshet(own_broker, "es", "forget", "enrollment", "s3", "--name", name)
        assert forgot.returncode == 0, forgot.stderr
        listed = freshet(own_broker, "es", "commands", "enrollment", "--name", name)
        assert listed.returncode == 0, listed.stderr
        enrolls = [line.split("\t") for line in listed.stdout.splitlines() if "\tEnroll\t" in line]
        assert [json.loads(row[4]) for row in enrolls] == [{"student_id": "s3", "name": "<forgotten>"},
                                                           {"student_id": "s4", "name": "Edsger Dijkstra"}]
        assert [row[5] for row in enrolls] == ["accepted", "rejected"]  # the refusal recorded s4's name
        events = freshet(own_broker, "es", "events", "enrollment", "--name", name)
        assert "Grace Hopper" not in events.stdout and "Edsger Dijkstra" in events.stdout
    finally:
        processor.stop()
    holding = []
    for root, _, files in os.walk(own_broker.data_dir):
        for file in files:
            with open(os.path.join(root, file), "rb") as f:
                data = f.read()
            if b"Grace Hopper" in data:
                holding.append(os.path.join(root, file))
    assert holding == [], holding


def test_es_command_line_rough_edges(broker, tmp_path):
    """Issue 45 item 7: an unknown command field names the field and the fields taken; `es commands` rows
    carry the id `es command` printed; `es state --version` past the last version is an error; `es project`
    started before the topics exist waits for them (or gives up after --wait)."""
    name = f"edges-{uuid.uuid4().hex[:8]}"
    db = f"sqlite:{tmp_path / 'views.db'}"
    gives_up = freshet(broker, "es", "project", "enrollment", "roster", "--db", db, "--name", name, "--wait", "1")
    assert gives_up.returncode == 1 and "Traceback" not in gives_up.stderr
    assert gives_up.stderr.strip().splitlines()[-1].startswith(f"error: {name}'s topics ")
    project = subprocess.Popen(freshet_argv("es", "project", "enrollment", "roster", "--db", db, "--name", name,
                                            "--bootstrap", broker.bootstrap),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first_line = project.stderr.readline()  # before the processor makes the topics: it says it waits
    processor = Processor(broker.bootstrap, name)
    try:
        assert first_line.startswith(f"waiting for {name}'s topics at {broker.bootstrap}"), first_line
        opened = freshet(broker, "es", "command", "enrollment", "course/c1", "OpenCourse",
                         '{"title": "Streams", "capacity": 2}', "--name", name)
        assert opened.returncode == 0, opened.stderr
        command_id = opened.stdout.strip().rsplit("; command ", 1)[1]
        typo = freshet(broker, "es", "command", "enrollment", "course/c1", "Enroll",
                       '{"student_id": "s1", "nmae": "Ada"}', "--name", name)
        assert typo.returncode == 1
        assert typo.stderr.strip() == "error: Enroll has no field 'nmae' (it takes: student_id, name)"
        rows = freshet(broker, "es", "commands", "enrollment", "--name", name).stdout.splitlines()
        assert [row.split("\t")[1:4] for row in rows] == [[command_id, "course/c1", "OpenCourse"]]
        past = freshet(broker, "es", "state", "enrollment", "course/c1", "--version", "2", "--name", name)
        assert past.returncode == 1
        assert past.stderr.strip() == "error: course/c1 is at version 1: it has no version 2"
        at_one = freshet(broker, "es", "state", "enrollment", "course/c1", "--version", "1", "--name", name)
        assert at_one.returncode == 0 and json.loads(at_one.stdout)["title"] == "Streams"

        from freshet.eventsourcing import Database
        from freshet.testing.polling import wait_for as wait_until

        def projected():
            database = Database(db)
            try:
                return database.execute("SELECT course, title FROM roster_courses") == [("c1", "Streams")]
            except sqlite3.OperationalError:  # the runner has not made its tables yet
                return False
            finally:
                database.close()

        wait_until(projected, 120, "the projection started before the topics to apply the first event", 0.2)
    finally:
        project.send_signal(signal.SIGINT)
        try:
            _, project_err = project.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            project.kill()
            project.communicate()
            raise
        processor.stop()
    assert project.returncode == 0, project_err
    assert project_err.strip() == "roster: 1 events applied"


def test_es_command_file_sends_many_over_one_connection(broker, tmp_path):
    """Issue 45 item 6: `es command --file` sends every line's command, prints one answer a line in the file's
    order, exits 1 saying how many were refused; a bad line sends nothing."""
    name = f"bulk-{uuid.uuid4().hex[:8]}"
    processor = Processor(broker.bootstrap, name)
    try:
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"stream": "course/b1", "command": "OpenCourse", "fields": {"title": "T", "capacity": 1}}\n'
                       '{"stream": "course/b1", "command": "Enroll", "fields": {"student_id": "s1", "naem": "x"}}\n')
        refused = freshet(broker, "es", "command", "enrollment", "--file", str(bad), "--name", name)
        assert refused.returncode == 1 and refused.stdout == ""
        assert refused.stderr.strip().startswith(f"error: Enroll has no field 'naem'"), refused.stderr
        for text, message in [('{"stream": "course/b1"', "line 1 is not JSON"),
                              ('{"stream": "course/b1", "command": "Cancel", "field": {}}', "line 1: unknown key 'field'"),
                              ("\n\n", "holds no commands")]:
            bad.write_text(text)
            r = freshet(broker, "es", "command", "enrollment", "--file", str(bad), "--name", name)
            assert r.returncode == 1 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        missing = freshet(broker, "es", "command", "enrollment", "--file", str(tmp_path / "nope"), "--name", name)
        assert missing.returncode == 1 and "nope" in missing.stderr and "Traceback" not in missing.stderr
        assert freshet(broker, "es", "commands", "enrollment", "--name", name).stdout == ""  # nothing was sent

        lines = [{"stream": "course/b1", "command": "OpenCourse", "fields": {"title": "Bulk", "capacity": 2}}]
        lines += [{"stream": "course/b1", "command": "Enroll", "fields": {"student_id": f"s{i}", "name": f"N{i}"}}
                  for i in range(4)]
        lines += [{"stream": "course/b1", "command": "Cancel", "fields": {"student_id": "s0"},
                   "expected_version": 5}]
        good = tmp_path / "commands.jsonl"
        good.write_text("\n".join(json.dumps(line) for line in lines[:3]) + "\n\n"
                        + "\n".join(json.dumps(line) for line in lines[3:]) + "\n")
        sent = freshet(broker, "es", "command", "enrollment", "--file", str(good), "--name", name)
        assert sent.returncode == 1, sent.stderr
        assert sent.stderr.strip() == "2 of 6 commands refused"
        out = sent.stdout.splitlines()
        assert [line.split(": ")[0:2] for line in out] == [
            ["line 1", "accepted"], ["line 2", "accepted"], ["line 3", "accepted"],
            ["line 5", "rejected"], ["line 6", "rejected"], ["line 7", "accepted"]]
        assert "course is full" in out[3] and out[5].startswith("line 7: accepted: course/b1 is at version 6")
        ids = [line.rsplit("; command ", 1)[1] for line in out]
        listed = freshet(broker, "es", "commands", "enrollment", "--name", name).stdout.splitlines()
        assert sorted(row.split("\t")[1] for row in listed) == sorted(ids)
        piped = freshet(broker, "es", "command", "enrollment", "--file", "-", "--name", name,
                        input=json.dumps({"stream": "course/b2", "command": "OpenCourse",
                                          "fields": {"title": "Piped", "capacity": 1}}) + "\n")
        assert piped.returncode == 0 and piped.stdout.startswith("line 1: accepted: course/b2 is at version 1")
    finally:
        processor.stop()


def test_es_process_refuses_an_instance_id_kafka_refuses_in_one_line_and_makes_nothing(broker):
    from confluent_kafka.admin import AdminClient

    name = f"cli-{uuid.uuid4().hex[:8]}"
    for bad, says in (("", "the instance id must not be empty"), ("no spaces", "other than ASCII letters")):
        r = freshet(broker, "es", "process", "enrollment", "--name", name, "--instance-id", bad, timeout=60)
        one_line_error(r, "error: ", says)
    topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30).topics
    assert not [t for t in topics if t.startswith(name)], "a refused instance id made the app's topics"
