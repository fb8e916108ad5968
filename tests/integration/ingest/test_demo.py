"""``freshet demo ingest`` as a newcomer runs it: every step shown and checked."""

from freshet.testing.cli import freshet


def test_demo_ingest_tells_the_story_and_checks_it(tmp_path):
    run = freshet("demo", "ingest", "--data-dir", tmp_path / "demo", timeout=240)
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    for step in ("1. one server in front of the log", "2. a REST Proxy request", "3. web-server logs over syslog",
                 "4. metrics over StatsD", "5. orders out by webhook", "6. what the server counted"):
        assert step in out
    assert "✗" not in out and "every step held" in out
    assert "web-02 nginx err: upstream timed out (rfc3164)" in out
    assert "orders.dead-letter" in out and "Idempotency-Key orders/" in out
