"""``freshet es`` and ``freshet demo enrollment`` as a user types them."""

import json
import os
import signal
import subprocess
import sys
import uuid



def freshet(broker, *args):
    return subprocess.run([sys.executable, "-m", "freshet.cli.main", *args, "--bootstrap", broker.bootstrap],
                          capture_output=True, text=True, timeout=120)


def test_commands_events_state_and_forget_from_the_command_line(broker, tmp_path):
    name = f"cli-{uuid.uuid4().hex[:8]}"
    processor = subprocess.Popen([sys.executable, "-m", "freshet.cli.main", "es", "process", "enrollment", "--name",
                                  name, "--bootstrap", broker.bootstrap], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
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
        assert [line.split("\t")[4] for line in listed] == ["accepted", "accepted", "rejected", "conflict"]

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
