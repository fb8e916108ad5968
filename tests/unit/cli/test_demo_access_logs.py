"""`make demo`'s live table (freshet demo access-logs): a minute still filling is shown open, not compared."""

from collections import namedtuple
from datetime import datetime, timedelta
from unittest import mock

import pytest

from freshet.cli.demos.access_logs import query_watermark, window_rows

Minute = namedtuple("Minute", "window_start window_end requests bytes server_errors")
Hour = namedtuple("Hour", "unique_exact unique_approx")
Sizes = namedtuple("Sizes", "p50_size p99_size")

START = datetime(2026, 11, 25, 12, 0)


def minutes(*counts: int) -> dict:
    out = {}
    for i, n in enumerate(counts):
        start = START + timedelta(minutes=i)
        out[start] = Minute(start, start + timedelta(minutes=1), n, n * 1000, 0)
    return out


def at(minute: int) -> float:
    """The watermark at the end of minute ``minute`` (counted from 0), in seconds since the epoch."""
    return (START + timedelta(minutes=minute + 1)).timestamp()


def versus(rows) -> list[str]:
    return [r[2] for r in rows]


def test_the_minute_still_filling_is_open_not_a_drop():
    # four full minutes, then one a third full: the watermark has passed the end of minute 3 only
    rows = window_rows(minutes(600, 610, 590, 600, 200), {}, {}, at(3))
    assert versus(rows) == ["-", "x1.0", "x1.0", "x1.0", "open"]
    assert [r[1] for r in rows] == ["600", "610", "590", "600", "200"]  # its count so far is shown


def test_every_minute_past_the_watermark_is_open_and_a_closed_drop_is_still_flagged():
    rows = window_rows(minutes(600, 150, 600, 20), {}, {}, at(1))
    assert versus(rows) == ["-", "x0.2 drop", "open", "open"]
    assert versus(window_rows(minutes(100, 400), {}, {}, at(1))) == ["-", "x4.0 spike"]
    assert versus(window_rows(minutes(100, 400), {}, {}, 0.0)) == ["open", "open"]  # no watermark yet


def test_a_minute_ending_exactly_at_the_watermark_is_closed():
    assert versus(window_rows(minutes(100, 90), {}, {}, at(1))) == ["-", "x0.9"]
    assert versus(window_rows(minutes(100, 90), {}, {}, at(1) - 0.001)) == ["-", "open"]


def test_rows_carry_the_hour_and_five_minute_figures_and_only_the_last_ten_minutes():
    rows = window_rows(minutes(*range(100, 112)), {START: Hour(40, 41)}, {START: Sizes(1200, 9000)}, at(11))
    assert len(rows) == 10 and rows[0][0] == "12:02" and rows[-1][0] == "12:11"
    assert rows[0][5:] == ("40 (41)", "1,200/9,000")


def test_the_watermark_is_read_from_the_querys_progress():
    class Query:
        lastProgress = {"eventTime": {"watermark": "2026-11-25T12:04:00.000Z", "max": "2026-11-25T12:06:00.000Z"}}

    assert query_watermark(Query()) == datetime.fromisoformat("2026-11-25T12:04:00+00:00").timestamp()
    Query.lastProgress = None
    assert query_watermark(Query()) == 0.0
    Query.lastProgress = {"eventTime": {}}
    assert query_watermark(Query()) == 0.0


@pytest.mark.parametrize("option, value", [("--seconds", "-5"), ("--rate", "0"), ("--time-scale", "-1")])
def test_a_bad_number_is_one_line_and_exit_1_before_anything_starts(option, value, tmp_path, capsys):
    # was: a broker, the dashboard and Spark started, then "generator failed: --seconds must be 0 or more"
    from freshet.cli.main import main

    data_dir = tmp_path / "demo-data"
    with pytest.raises(SystemExit) as exited:
        with mock.patch("sys.argv", ["freshet", "demo", "access-logs", option, value, "--data-dir", str(data_dir)]):
            main()
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith(f"freshet demo access-logs: invalid value for '{option}'"), err
    assert err.count("\n") == 1, err
    assert not data_dir.exists()  # nothing was started
