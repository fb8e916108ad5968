"""The controllers' cluster secret on a three-broker cluster whose controllers ask for it on their JSON endpoint
(``freshet cluster start --endpoint-auth``: ``python -m freshet.controller --password-file F --endpoint-auth``):
the brokers it starts prove it (``$FRESHET_CONTROLLER_PASSWORD_FILE``) and serve as usual, ``freshet cluster``'s
commands prove it from the cluster's directory, and a client or a broker without it is refused
(CLUSTER_AUTHORIZATION_FAILED) and changes nothing."""

import os
import subprocess

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import NewTopic

from freshet.controller.client import ControllerClient
from freshet.local import free_port
from freshet.local.cluster import LocalCluster
from freshet.testing.cli import freshet_argv

from .conftest import admin
from .test_cli import free_base_port, freshet
from .test_metadata import created


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """``freshet cluster start --endpoint-auth``, left running for the module's tests."""
    directory = str(tmp_path_factory.mktemp("guarded") / "cluster")
    started = freshet("cluster", "start", "--brokers", "3", "--base-port", str(free_base_port()),
                      "--data-dir", directory, "--endpoint-auth")
    try:
        assert started.returncode == 0, started.stderr
        yield LocalCluster.attach(directory)
    finally:
        freshet("cluster", "stop", "--data-dir", directory)


def test_brokers_and_the_cluster_commands_prove_the_secret_and_serve(guarded):
    created(admin(guarded.bootstrap), NewTopic("behind-the-secret", 3, 3))
    topics = {t["name"]: t for t in guarded.metadata()["topics"]}
    assert [len(p["replicas"]) for p in topics["behind-the-secret"]["partitions"]] == [3, 3, 3]
    for address in guarded.controller_addresses:
        with ControllerClient(address, timeout=30, password=guarded.password) as client:
            status = client.status()
        assert status["endpoint_auth"] and status["raft_encrypted"]
    from freshet.cli.main import cli

    run = CliRunner().invoke(cli, ["cluster", "rebalance", "--data-dir", guarded.directory])  # reads, moves nothing
    assert run.exit_code == 0 and "replicas per broker" in run.output, run.output
    status = freshet("cluster", "status", "--data-dir", guarded.directory)
    assert status.returncode == 0 and "broker 3 " in status.stdout and " live " in status.stdout, status.stderr


def test_a_client_without_the_secret_is_refused_and_changes_nothing(guarded):
    before = guarded.metadata()
    for address in guarded.controller_addresses:
        with ControllerClient(address, timeout=30, password="") as client:
            answer = client.command({"command": "UnregisterBroker", "broker_id": 3})
        assert answer["error"] == "CLUSTER_AUTHORIZATION_FAILED", answer
    after = guarded.metadata()
    assert [b["broker_id"] for b in after["brokers"]] == [b["broker_id"] for b in before["brokers"]] == [1, 2, 3]


def test_a_broker_without_the_secret_cannot_register(guarded, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FRESHET_CONTROLLER_PASSWORD_FILE"}
    controllers = ",".join(f"{h}:{p}" for h, p in guarded.controller_addresses)
    done = subprocess.run(freshet_argv("broker", "start", "--node-id", "7", "--controller", controllers,
                                       "--data-dir", str(tmp_path / "intruder"), "--port", str(free_port())),
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "CLUSTER_AUTHORIZATION_FAILED" in done.stderr, done.stderr
    assert 7 not in [b["broker_id"] for b in guarded.metadata()["brokers"]]


def test_a_bad_controller_password_file_is_one_line_and_exit_1(tmp_path):
    short = tmp_path / "short"
    short.write_text("tiny\n")
    for path, words in [(tmp_path / "missing", "cannot read the controller password file"),
                        (short, "has 4 characters; give at least 16")]:
        for how in ("flag", "env"):
            args = ["broker", "start", "--controller", "127.0.0.1:1", "--data-dir", str(tmp_path / "b"),
                    "--port", str(free_port())]
            env = dict(os.environ)
            if how == "flag":
                args += ["--controller-password-file", str(path)]
            else:
                env["FRESHET_CONTROLLER_PASSWORD_FILE"] = str(path)
            done = subprocess.run(freshet_argv(*args), capture_output=True, text=True, timeout=120, env=env)
            assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, (how, done.stderr)
            assert "--controller-password-file" in done.stderr and words in done.stderr, (how, done.stderr)
