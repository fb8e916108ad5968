"""The broker as a child process (tests, benchmarks, demo): where its log goes, and what a failed start says."""

import glob
import os
import tempfile

import pytest

from freshet.local import BrokerProcess


def test_log_lands_beside_the_data_and_nothing_is_left_in_the_system_temp_dir(tmp_path):
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "*broker*.log")))
    with BrokerProcess(data_dir=str(tmp_path / "d")) as b:
        assert os.path.dirname(b.log_path) == str(tmp_path)
    with open(b.log_path) as log:
        assert "listening" in log.read()
    with BrokerProcess() as b:  # its own temporary directory: data and log, removed on close
        own = os.path.dirname(b.log_path)
        assert os.path.isdir(b.data_dir) and os.path.dirname(b.data_dir) == own
    assert not os.path.exists(own)
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "*broker*.log"))) == before


def test_a_broker_that_cannot_start_says_why(tmp_path):
    b = BrokerProcess(data_dir=str(tmp_path / "d"), extra_args=["--no-such-option"])
    with pytest.raises(RuntimeError, match="broker exited with 1") as failed:
        b.start()
    assert "no-such-option" in str(failed.value)  # the log's last lines are in the message
    assert b.proc is None and b._log is None


def test_a_started_broker_used_as_a_context_is_stopped_once_and_not_started_twice(tmp_path):
    broker = BrokerProcess(data_dir=str(tmp_path / "data")).start()
    with broker as same:
        assert same is broker and broker.running
        with pytest.raises(RuntimeError, match="already running"):
            broker.start()
    assert not broker.running  # the child the block's end stopped is the only one there was


def test_a_port_another_process_listens_on_is_not_taken_for_the_broker_started(tmp_path):
    """start() waited for "something answers on the port": when another process held it (a free port picked by
    two at once), start() returned at once with a broker that was about to exit, its data directory not there
    (a fresh-clone run failed once on it). Now it waits for the broker's own listening socket: the broker,
    refused the bind, exits and start() says why."""
    import socket

    from freshet.local.broker import listens

    with socket.socket() as other, socket.socket() as bound_only:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        bound_only.bind(("127.0.0.1", 0))
        assert listens(os.getpid(), port) and not listens(os.getpid(), bound_only.getsockname()[1])
        broker = BrokerProcess(data_dir=str(tmp_path / "d"), port=port)
        with pytest.raises(RuntimeError, match="broker exited with"):
            broker.start()
        assert broker.proc is None and not broker.running
    with BrokerProcess(data_dir=str(tmp_path / "d"), port=port) as b:  # the port free again: it starts there
        assert listens(b.pid, port) and b.running


def test_a_port_it_picked_that_another_process_took_is_picked_again(tmp_path, monkeypatch):
    """A port BrokerProcess picked itself (none given) and another process took before the broker's bind: it picks
    another and starts there; once started, its ports stay (a restart keeps the port its clients know)."""
    import socket

    import freshet.local.broker as local_broker

    real = local_broker.free_port
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken = other.getsockname()[1]
        picks = iter([taken])
        monkeypatch.setattr(local_broker, "free_port", lambda: next(picks, None) or real())
        broker = BrokerProcess(data_dir=str(tmp_path / "d"))
        assert broker.port == taken
        with broker:
            assert broker.port != taken and local_broker.listens(broker.pid, broker.port)
            first = broker.port
        with open(broker.log_path) as log:
            assert "address already in use" in log.read().lower()
    broker.start()
    try:
        assert broker.port == first
    finally:
        broker.stop()


def test_free_ports_come_from_the_tests_range_below_the_ephemeral_one(monkeypatch):
    """The suite's servers take ports at random in FRESHET_TEST_PORTS (one slice per worker, below the kernel's
    ephemeral range that outgoing connections draw from); without it, the kernel's pick."""
    import socket

    from freshet.local.broker import free_port

    low, high = (int(n) for n in os.environ["FRESHET_TEST_PORTS"].split("-"))
    assert 1024 < low < high < 32768
    picked = {free_port() for _ in range(50)}
    assert all(low <= p <= high for p in picked) and len(picked) > 1
    with socket.socket() as held:  # a bound port is never handed out
        held.bind(("127.0.0.1", low))
        monkeypatch.setenv("FRESHET_TEST_PORTS", f"{low}-{low + 1}")
        assert {free_port() for _ in range(20)} == {low + 1}
    monkeypatch.delenv("FRESHET_TEST_PORTS")
    assert free_port() >= 1024
