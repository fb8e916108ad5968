"""What a Spark cluster's directory says, without starting a JVM: a stale cluster.json, a reused pid."""

import json
import os
import subprocess
import sys

import pytest

from freshet.local.spark_cluster import (
    ClusterState,
    SparkCluster,
    SparkClusterError,
    WorkerState,
    connect_server_conf,
)
from freshet.pipelines.runner import shared_path


def write_state(directory, master_pid, worker_pids=()):
    state = ClusterState("127.0.0.1", 7077, 8080, master_pid,
                         [WorkerState(pid, 8081 + i, 1, "1g", "w.log") for i, pid in enumerate(worker_pids)])
    state.save(os.path.join(directory, "cluster.json"))


def test_a_state_file_whose_processes_are_gone_is_no_cluster_and_is_removed(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    write_state(tmp_path, gone.pid, [gone.pid])
    cluster = SparkCluster(str(tmp_path))
    assert cluster.attach() is False
    assert not (tmp_path / "cluster.json").exists()
    with pytest.raises(SparkClusterError, match="no Spark cluster is running"):
        _ = cluster.master_url


def test_a_reused_pid_is_neither_taken_for_the_cluster_nor_signalled(tmp_path):
    """After a reboot the pids in cluster.json may belong to anything: this very process, here."""
    write_state(tmp_path, os.getpid(), [os.getpid()])
    assert SparkCluster(str(tmp_path)).attach() is False  # and this process is still alive to say so


def test_a_damaged_state_file_is_a_clear_error(tmp_path):
    (tmp_path / "cluster.json").write_text("{not json")
    with pytest.raises(SparkClusterError, match="cannot be read"):
        SparkCluster(str(tmp_path)).attach()


def test_the_state_round_trips_and_names_its_urls(tmp_path):
    write_state(tmp_path, 123, [456])
    state = ClusterState.load(str(tmp_path / "cluster.json"))
    assert state.master_url == "spark://127.0.0.1:7077" and state.master_ui == "http://127.0.0.1:8080"
    assert state.workers[0].pid == 456 and state.connect_url is None
    assert json.loads((tmp_path / "cluster.json").read_text())["master_pid"] == 123


def test_bad_cluster_shapes_are_refused(tmp_path):
    for kwargs, needle in (({"workers": 0}, "at least one worker"), ({"cores": 0}, "at least one core")):
        with pytest.raises(SparkClusterError, match=needle):
            SparkCluster(str(tmp_path), **kwargs)


def test_the_connect_server_holds_the_cores_it_is_given_and_says_so_to_its_clients():
    conf = connect_server_conf(15002, "127.0.0.1", 3, 4041)
    assert conf["spark.cores.max"] == conf["spark.default.parallelism"] == "3"
    assert conf["spark.connect.grpc.binding.port"] == "15002" and conf["spark.executor.cores"] == "1"
    # its Python workers fork from Freshet's daemon, which imported what their tasks import, as a local session's
    assert conf["spark.python.daemon.module"] == "freshet.spark.daemon"


def test_paths_every_process_of_a_query_sees():
    assert shared_path("checkpoints/x") == os.path.join(os.getcwd(), "checkpoints/x")
    for uri in ("s3a://bucket/ck", "hdfs://nn:8020/ck", "file:/tmp/ck", "/abs/ck"):
        assert shared_path(uri) == uri


def test_which_engines_are_on_this_machine():
    from freshet.spark.session import on_this_machine

    for here in ("local[2]", "spark://127.0.0.1:7077", "sc://localhost:15002", "sc://127.0.0.1/;token=x"):
        assert on_this_machine(here), here
    for elsewhere in ("spark://10.0.0.5:7077", "sc://spark.example.com:15002", "yarn"):
        assert not on_this_machine(elsewhere), elsewhere
