"""What every demo shares (freshet.cli.demos.preamble.Demo): a fresh data directory, its own broker stopped
however the demo ends, checked steps that end the demo with exit 1 when one does not hold."""

import pytest

from freshet.cli.demos.preamble import Demo
from freshet.client import TopicAdmin


def test_a_demo_starts_its_broker_on_a_fresh_directory_and_stops_it_when_it_fails(tmp_path, capsys):
    data_dir = tmp_path / "demo"
    data_dir.mkdir()
    (data_dir / "left-over").write_text("from an earlier run")
    with pytest.raises(RuntimeError, match="the story broke"):
        with Demo(str(data_dir)) as demo:
            broker = demo.broker
            assert not (data_dir / "left-over").exists()
            TopicAdmin(demo.bootstrap).create_topic("story", 1)
            assert (data_dir / "log").is_dir() and (data_dir / "broker.log").exists()
            raise RuntimeError("the story broke")
    assert not broker.running


def test_a_step_that_does_not_hold_makes_the_demo_exit_1(tmp_path, capsys):
    with Demo(str(tmp_path / "ok"), broker=False) as demo:
        assert demo.check(True, "one step held")
        demo.require(True, "silent when it holds")
        demo.finish()
    out = capsys.readouterr().out
    assert "✓ one step held" in out and "silent" not in out and "every step held" in out

    with pytest.raises(SystemExit) as exit_, Demo(str(tmp_path / "bad"), broker=False) as demo:
        demo.check(False, "a step that failed")
        demo.check(True, "a later one still shown")
        demo.finish()
    assert exit_.value.code == 1
    out = capsys.readouterr().out
    assert "✗ a step that failed" in out and "✓ a later one still shown" in out and "1 step(s) did not hold" in out

    with pytest.raises(SystemExit) as exit_, Demo(str(tmp_path / "required"), broker=False) as demo:
        demo.require(False, "what the rest builds on")
        demo.check(True, "never reached")
    assert exit_.value.code == 1
    assert "never reached" not in capsys.readouterr().out


def test_a_kept_directory_keeps_what_it_holds(tmp_path):
    (tmp_path / "other-demo").mkdir()
    with Demo(str(tmp_path), fresh=False, broker=False):
        pass
    assert (tmp_path / "other-demo").is_dir()
