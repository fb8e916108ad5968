"""`make demo`: the main job, as a user starts it."""

import os
import re
import subprocess
import sys

from freshet.cli.common import stderr_to
from freshet.local import free_port
from freshet.testing.cli import freshet


def test_stderr_to_takes_what_child_processes_write_and_gives_it_back(tmp_path, capfd):
    log = tmp_path / "spark.log"
    with stderr_to(str(log)) as terminal:
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('from a child\\n')"], check=True)
        os.write(2, b"from this process\n")
        terminal.write("for the user\n")
    os.write(2, b"after\n")
    assert log.read_text().splitlines() == ["from a child", "from this process"]
    assert capfd.readouterr().err == "for the user\nafter\n"


def test_demo_shows_window_results_and_keeps_spark_noise_off_the_terminal(tmp_path):
    data_dir = tmp_path / "demo-data"
    r = freshet("demo", "access-logs", "--seconds", "30", "--data-dir", data_dir, "--dashboard-port", free_port())
    assert r.returncode == 0, r.stdout + r.stderr
    produced = int(re.search(r"done: ([\d,]+) events", r.stdout).group(1).replace(",", ""))
    assert produced >= 30 * 2000 * 0.9
    # rows of the live table: an event-time minute and its request count
    rows = re.findall(r"│\s+\d\d:\d\d │\s+(\d+) │\s+(x[\d.]+(?: spike| drop)?|-|open) │", r.stdout)
    assert rows and sum(int(n) for n, _ in rows) > 0
    assert any(versus.startswith("x") for _, versus in rows)  # each closed minute beside the one before
    # the last minute is still filling when the generator stops (the watermark is 2 minutes behind): open
    assert rows[-1][1] == "open"
    assert "Traceback" not in r.stderr and "WARNING" not in r.stderr, r.stderr
    assert (data_dir / "spark.log").stat().st_size > 0  # the JVM's own output went to the log
    assert list((data_dir / "warehouse" / "requests_per_minute").glob("*.parquet"))
