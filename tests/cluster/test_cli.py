"""``freshet cluster start / status / stop``: a three-broker cluster left running by one command, described and
stopped by others; a second start in the same directory, and commands on no cluster, are one line and exit 1."""

import random
import socket
import subprocess
import sys

from .conftest import DEADLINE


def freshet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "freshet.cli.main", *args], capture_output=True, text=True,
                          timeout=DEADLINE + 60)


def free_base_port() -> int:
    """A base port whose nine ports of a three-broker cluster (BASE+0..2, +100..102, +200..202) are free."""
    for _ in range(200):
        base = random.randrange(20000, 40000)
        try:
            for port in [base + offset + i for offset in (0, 100, 200) for i in range(3)]:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free run of ports")


def test_start_status_stop(tmp_path):
    directory = str(tmp_path / "cluster")
    base = free_base_port()
    started = freshet("cluster", "start", "--brokers", "3", "--base-port", str(base), "--data-dir", directory)
    try:
        assert started.returncode == 0, started.stderr
        assert f"bootstrap servers: 127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}" in started.stdout
        again = freshet("cluster", "start", "--base-port", str(base), "--data-dir", directory)
        assert again.returncode == 1 and again.stderr.startswith("error: a cluster already runs in ")
        assert len(again.stderr.strip().splitlines()) == 1

        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{base}"})
        admin.create_topics([NewTopic("events", 2)])["events"].result(60)
        status = freshet("cluster", "status", "--data-dir", directory)
        assert status.returncode == 0, status.stderr
        lines = status.stdout.splitlines()
        assert lines[0].startswith("controller ") and "active (of 3)" in lines[0]
        active = int(lines[0].split()[1])
        assert [line.split() for line in lines[1:4]] == [
            ["controller", str(i), f"127.0.0.1:{base + 100 + i - 1}", "active" if i == active else "voter",
             "running"] for i in (1, 2, 3)]
        assert [line.split()[:4] for line in lines[4:7]] == [
            ["broker", str(i), f"127.0.0.1:{base + i - 1}", "live"] for i in (1, 2, 3)]
        assert lines[7] == "1 topic(s), 2 partition(s): 0 under-replicated, 0 offline"
    finally:
        stopped = freshet("cluster", "stop", "--data-dir", directory)
    assert stopped.returncode == 0 and stopped.stdout.startswith("stopped the cluster in ")
    after = freshet("cluster", "status", "--data-dir", directory)
    assert (after.returncode, after.stderr.strip()) == (
        1, f"error: the cluster in {directory} is not running (freshet cluster start)")


def test_commands_on_no_cluster_are_one_line(tmp_path):
    for command in ("status", "stop"):
        answer = freshet("cluster", command, "--data-dir", str(tmp_path / "none"))
        assert answer.returncode == 1
        assert answer.stderr.strip() == (f"error: no cluster in {tmp_path / 'none'} (no cluster.json): start one "
                                         "with freshet cluster start")
    bad = freshet("cluster", "start", "--session-timeout-ms", "10", "--data-dir", str(tmp_path / "x"))
    assert (bad.returncode, bad.stderr.strip()) == (1, "error: --session-timeout-ms must be at least 1000")
