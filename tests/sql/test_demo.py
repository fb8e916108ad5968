"""`freshet demo sql` runs the docs' tour and checks every step (SQL results equal to the Python pipelines')."""

from freshet.testing.cli import freshet


def test_the_sql_demo_holds(tmp_path):
    run = freshet("demo", "sql", "--data-dir", str(tmp_path / "demo"), timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "every step held" in run.stdout
    assert "equal to the Python pipeline's (requests_per_minute)" in run.stdout
    assert "equal to the Python pipeline's (unique_users_per_hour)" in run.stdout
    assert "error: line 3, column" in run.stdout
