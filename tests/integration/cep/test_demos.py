"""`freshet demo intrusion` and `freshet demo alerts` as a newcomer runs them: every step shown and checked
(each starts a broker and a Spark driver of its own)."""

import pytest

from freshet.testing.cli import freshet


def demo(name: str, tmp_path, *args):
    return freshet("demo", name, "--data-dir", tmp_path / name, *args, timeout=400, env={"COLUMNS": "120"})


@pytest.mark.timeout(450)
def test_demo_intrusion_alerts_are_the_planted_attacks(tmp_path):
    run = demo("intrusion", tmp_path, "--events", "3000", "--attacks", "2")
    out = run.stdout
    assert run.returncode == 0, out + run.stderr[-3000:]
    for step in ("1. security events", "2. the rules", "3. matching on Spark", "4. the alerts against the plan"):
        assert step in out
    assert "6 alerts: every planted attack once, nothing else (6 planted)" in out
    assert "✗" not in out and "every step held" in out


@pytest.mark.timeout(450)
def test_demo_alerts_match_a_full_scan(tmp_path):
    run = demo("alerts", tmp_path, "--listings", "500")
    out = run.stdout
    assert run.returncode == 0, out + run.stderr[-3000:]
    for step in ("1. stored searches", "2. listings", "3. matching on Spark", "4. the alerts against a full scan"):
        assert step in out
    assert "the same as the scan's" in out and "✗" not in out and "every step held" in out
