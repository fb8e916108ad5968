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
