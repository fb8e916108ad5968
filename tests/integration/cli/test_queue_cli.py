"""``freshet queue``, share groups in ``freshet groups``, and ``freshet demo redelivery``, as a user types them."""

from freshet.testing.cli import freshet


def test_a_work_queue_with_a_failing_job(broker, topic_name):
    group = f"{topic_name}-workers"
    assert freshet(broker, "topic", "create", topic_name, "--partitions", "2").returncode == 0
    for p in (0, 1):
        freshet(broker, "produce", topic_name, "--partition", str(p), input="".join(f"job-{i}\n" for i in range(p, 10, 2)))
    r = freshet(broker, "queue", "config", group, "share.delivery.count.limit=2")
    assert r.returncode == 0 and r.stdout == f"{group}\tshare.delivery.count.limit=2\n"
    # the command fails on job-3 every time: it is released, redelivered once more, then archived
    r = freshet(broker, "queue", "consume", topic_name, "--group", group, "--from-beginning", "--idle", "2",
                "--exec", "grep -qv job-3")
    assert r.returncode == 0, r.stderr
    lines = [line.split("\t") for line in r.stdout.splitlines()]
    values = [v for *_, v in lines]
    assert sorted(set(values)) == [f"job-{i}" for i in range(10)]
    assert [(v, d) for _, _, d, _, v in lines if v == "job-3"] == [("job-3", "1"), ("job-3", "2")]
    part = next(p for p, _, _, _, v in lines if v == "job-3")
    assert "11 records handled" in r.stderr
    listed = freshet(broker, "groups", "list")
    assert f"{group}\tEMPTY\tshare" in listed.stdout
    described = freshet(broker, "groups", "describe", group)
    assert described.returncode == 0, described.stderr
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in described.stdout.splitlines() if "│" in line]
    cells = [row for row in rows if len(row) == 8 and row[1].isdigit()]  # (a long topic name wraps)
    # per partition: start, end, acquired, again, archived, backlog; job-3 archived after 2 deliveries
    assert sorted(c[1:] for c in cells) == [[p, "5", "5", "0", "0", str(int(p == part)), "0"] for p in "01"], \
        described.stdout
    assert "config share.delivery.count.limit=2" in described.stdout


def test_queue_consume_stops_after_max_and_gives_the_rest_back(broker, topic_name):
    group = f"{topic_name}-workers"
    freshet(broker, "topic", "create", topic_name)
    freshet(broker, "produce", topic_name, input="".join(f"{i}\n" for i in range(8)))
    first = freshet(broker, "queue", "consume", topic_name, "-g", group, "--from-beginning", "--max", "3")
    assert [line.split("\t")[4] for line in first.stdout.splitlines()] == ["0", "1", "2"]
    rest = freshet(broker, "queue", "consume", topic_name, "-g", group, "--idle", "2")
    assert [line.split("\t")[4] for line in rest.stdout.splitlines()] == ["3", "4", "5", "6", "7"]


def test_bad_queue_commands_are_one_line_errors(broker, topic_name):
    for args, message in [
        (("queue", "consume", "no-such-topic", "-g", "g"), "does not exist"),
        (("queue", "consume", topic_name, "-g", "g", "--max", "0"), "--max must be 1 or more"),
        (("queue", "config", "g", "share.delivery.count.limit=99"), "out of range"),
        (("queue", "config", "g", "share.nonsense=1"), "unknown share group config"),
        (("queue", "config", "g", "no-equals-sign"), "is not KEY=VALUE"),
    ]:
        r = freshet(broker, *args)
        assert r.returncode == 1 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


def test_demo_redelivery_tells_the_story_and_checks_it(tmp_path):
    r = freshet("demo", "redelivery", "--data-dir", tmp_path / "demo", timeout=300, env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "killed -9 after taking" in out
    assert "none was lost" in out
    assert "every partition in strict offset order (0 out of order)" in out
    assert "backlog 0" in out
