"""`make demo`: the main job, as a user starts it."""

import os
import re
import subprocess
import sys

import pytest

from freshet.cli.common import stderr_to
from freshet.cli.demos.access_logs import CATCH_UP_S, _caught_up, _fail_if_stopped, _source_up
from freshet.local import free_port
from freshet.testing.cli import freshet


def test_stderr_to_takes_what_child_processes_write_and_gives_it_back(tmp_path, capfd):
    log = tmp_path / "spark.log"
    with stderr_to(str(log)) as terminal:
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('from a child\\n')"], check=True)
        os.write(2, b"from this process\n")
        terminal.write("for the user\n")
    os.write(2, b"after\n")

    def ours(lines: list[str]) -> list[str]:  # not librdkafka's log lines ("%3|..."): a client of an earlier test
        return [line for line in lines if not line.startswith("%")]  # in this worker may still be writing them

    assert ours(log.read_text().splitlines()) == ["from a child", "from this process"]
    assert ours(capfd.readouterr().err.splitlines()) == ["for the user", "after"]


class _Query:
    def __init__(self, progress, message="Waiting for data to arrive", error=None, name="q"):
        self.lastProgress, self.status, self.name = progress, {"message": message}, name
        self.isActive = error is None
        self._error = error

    def exception(self):
        return self._error


def _progress(ends: dict[int, int], rows: int) -> dict:
    return {"numInputRows": rows, "sources": [{"endOffset": {"t": {str(p): o for p, o in ends.items()}}}]}


def test_the_demo_waits_until_each_query_has_read_the_end_offsets_and_run_a_batch_after_them():
    ends = {("t", 0): 10, ("t", 1): 5}
    assert not _caught_up(_Query(None), ends)  # no batch yet
    assert not _caught_up(_Query(_progress({0: 10, 1: 4}, 0)), ends)  # partition 1 not read to its end
    # read to the end, but by the batch that read the last events: the watermark they move is not applied yet
    # (an append-mode sink such as the Parquet copy writes the minutes they close in the next batch)
    assert not _caught_up(_Query(_progress({0: 10, 1: 5}, 300)), ends)
    assert _caught_up(_Query(_progress({0: 10, 1: 5}, 0)), ends)  # then a batch (or idle report) with nothing new
    assert _caught_up(_Query(_progress({0: 10, 1: 5}, 0)), {("t", 0): 0, ("t", 1): 0})


def test_the_demo_starts_a_query_once_the_one_before_has_its_source_up():
    # each freshet source has Spark start a Python process that must connect back within 10 s: one at a time
    assert not _source_up(_Query(None, "Initializing sources"))
    assert _source_up(_Query(None, "Waiting for data to arrive"))
    assert _source_up(_Query({"numInputRows": 0}, "Initializing sources"))


def test_a_query_that_stopped_on_an_error_ends_the_demo_in_one_line(capsys):
    from rich.console import Console

    running = _Query(None)
    _fail_if_stopped(Console(), [running])  # nothing to say
    failed = _Query(None, error=RuntimeError("Python worker failed to connect back.\n\tat ..."), name="unique-users")
    with pytest.raises(SystemExit) as stopped:
        _fail_if_stopped(Console(width=200), [running, failed])
    assert stopped.value.code == 1
    assert capsys.readouterr().out == ("spark query unique-users failed: Python worker failed to connect back. "
                                       "(details in spark.log)\n")


# 12 s of events at the demo's time scale (30x) are 6 event-time minutes: with the watermark 2 minutes behind,
# minutes 0-3 close (each after the first compared with the one before) and the last is still open. Fewer
# events than the default run's, so fewer and shorter Spark batches to catch up on (the test's cost is its CPU)
SECONDS = 12


@pytest.mark.timeout(CATCH_UP_S + 600)  # the Spark session's start, the events, and the catch-up's deadline
def test_demo_shows_window_results_and_keeps_spark_noise_off_the_terminal(tmp_path):
    data_dir = tmp_path / "demo-data"
    r = freshet("demo", "access-logs", "--seconds", str(SECONDS), "--data-dir", data_dir,
                "--dashboard-port", free_port(), timeout=CATCH_UP_S + 540)
    assert r.returncode == 0, r.stdout + r.stderr
    produced = int(re.search(r"done: ([\d,]+) events", r.stdout).group(1).replace(",", ""))
    assert produced >= SECONDS * 2000 * 0.9
    # rows of the live table: an event-time minute and its request count
    rows = re.findall(r"│\s+\d\d:\d\d │\s+(\d+) │\s+(x[\d.]+(?: spike| drop)?|-|open) │", r.stdout)
    assert rows and sum(int(n) for n, _ in rows) > 0
    assert any(versus.startswith("x") for _, versus in rows)  # each closed minute beside the one before
    # the last minute is still filling when the generator stops (the watermark is 2 minutes behind): open
    assert rows[-1][1] == "open"
    assert "gave up waiting" not in r.stdout
    assert "Traceback" not in r.stderr and "WARNING" not in r.stderr, r.stderr
    assert (data_dir / "spark.log").stat().st_size > 0  # the JVM's own output went to the log
    assert list((data_dir / "warehouse" / "requests_per_minute").glob("*.parquet"))
