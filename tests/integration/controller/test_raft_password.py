"""The controllers' cluster secret (pysyncobj's ``password``): Raft traffic between controllers is encrypted and
authenticated, so a node without the secret cannot join the quorum, learn the metadata or change it, and bytes
sent to a Raft port are never unpickled unless they decrypt. Three controllers in this process."""

import os
import pickle
import socket
import struct
import time
import zlib

import pytest

from freshet.controller.node import Controller, parse_voters, read_password_file
from freshet.local import free_port

SECRET = "correct horse battery staple 42"
DEADLINE = 60.0


def wait_for(what: str, probe, deadline: float = DEADLINE):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if value := probe():
            return value
        time.sleep(0.05)
    pytest.fail(f"gave up waiting for {what} after {deadline} s")


def start(node_id: int, voters, password: str | None) -> Controller:
    return Controller(node_id, voters, listen=("127.0.0.1", free_port()), password=password,
                      command_timeout_s=3.0).start()


@pytest.fixture
def voters():
    return parse_voters(",".join(f"{i}@127.0.0.1:{free_port()}" for i in (1, 2, 3)))


def create(controller: Controller, name: str):
    return controller.propose_dict({"command": "CreateTopic", "name": name, "partitions": 1,
                                    "replication_factor": 1})


def register(controller: Controller) -> None:
    """One broker, so that a topic can be placed."""
    result = controller.propose_dict({"command": "RegisterBroker", "broker_id": 1, "incarnation_id": "i",
                                      "host": "127.0.0.1", "port": 9092})
    assert result.ok, result
    heartbeat = controller.propose_dict({"command": "BrokerHeartbeat", "broker_id": 1,
                                         "broker_epoch": result.value["broker_epoch"]})
    assert heartbeat.ok, heartbeat


@pytest.mark.parametrize("intruder_password", [None, "not the cluster's secret at all"])
def test_a_controller_without_the_secret_cannot_join_read_or_change_the_metadata(voters, intruder_password):
    good = [start(1, voters, SECRET), start(2, voters, SECRET)]
    intruder = start(3, voters, intruder_password)  # voter 3's address, the wrong secret (or none)
    try:
        active = wait_for("an active controller among the two with the secret",
                          lambda: next((c for c in good if c.is_active()), None))
        assert active.status()["raft_encrypted"]
        assert intruder.status()["raft_encrypted"] == bool(intruder_password)
        register(active)
        assert create(active, "known").ok  # the two with the secret are a quorum and commit
        assert wait_for("the other one applied it",
                        lambda: all(c.state.read(lambda m: m.topic_by_name("known")) for c in good))
        refused = create(intruder, "intruder-topic")
        assert refused.error in ("NOT_CONTROLLER", "REQUEST_TIMED_OUT"), refused
        status = intruder.status()
        assert not status["active"] and status["peers_connected"] == 0
        assert intruder.metadata()["topics"] == []  # it never learned the cluster's metadata
        assert all(c.state.read(lambda m: m.topic_by_name("intruder-topic")) is None for c in good)
        assert all(c.status()["peers_connected"] == 1 for c in good)  # each other, not the intruder
    finally:
        for c in [*good, intruder]:
            c.stop()


class _MakesADirectory:
    """What an attacker would pickle: unpickling it runs os.mkdir(path)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


def send_to_raft_port(address: tuple[str, int], payload) -> None:
    """One pysyncobj frame (a native 4-byte length, zlib'd pickle) as a node without the secret sends it."""
    data = zlib.compress(pickle.dumps(payload))
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(struct.pack("i", len(data)) + data)
        sock.settimeout(10)
        try:
            while sock.recv(1 << 16):  # until the node closes the connection (or the timeout)
                pass
        except (socket.timeout, ConnectionError):
            pass


@pytest.mark.parametrize("password", [SECRET, None])
def test_bytes_sent_to_the_raft_port_are_unpickled_only_without_the_secret(tmp_path, password):
    voters = parse_voters(f"1@127.0.0.1:{free_port()}")
    controller = start(1, voters, password)
    try:
        wait_for("a one-node group's leader", controller.is_active)
        target = tmp_path / "made-by-a-stranger"
        send_to_raft_port((voters[0].host, voters[0].port), _MakesADirectory(str(target)))
        if password is None:  # the hole the secret closes: pickle from anyone reaching the port
            wait_for("the stranger's pickle run", target.exists)
        else:
            time.sleep(0.5)  # give a (wrong) unpickling a moment; the connection is closed already
            assert not target.exists()
        assert controller.is_active()
    finally:
        controller.stop()


def test_the_password_file_must_hold_a_secret_of_16_characters_only_its_owner_may_read(tmp_path):
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    assert read_password_file(str(path)) == SECRET
    for mode in (0o640, 0o604, 0o620):
        path.chmod(mode)
        with pytest.raises(ValueError, match=f"has mode {mode:04o}: other users may read it; chmod 600"):
            read_password_file(str(path))
    path.write_text("short\n")
    with pytest.raises(ValueError, match="has 5 characters; give at least 16"):
        read_password_file(str(path))
    with pytest.raises(ValueError, match="cannot read the controller password file .*missing"):
        read_password_file(str(tmp_path / "missing"))


def test_a_controller_process_with_a_bad_password_file_exits_1_with_one_line(tmp_path):
    import subprocess
    import sys

    short = tmp_path / "short"
    short.write_text("tiny\n")
    for path, words in [(tmp_path / "missing", "cannot read the controller password file"),
                        (short, "has 4 characters; give at least 16")]:
        done = subprocess.run([sys.executable, "-m", "freshet.controller", "--node-id", "1", "--voters",
                               f"1@127.0.0.1:{free_port()}", "--listen", f"127.0.0.1:{free_port()}",
                               "--password-file", str(path)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert words in done.stderr


# -- the JSON endpoint with --endpoint-auth ---------------------------------------------------------------------
@pytest.fixture
def guarded():
    """A one-node group whose endpoint asks for the secret."""
    voters = parse_voters(f"1@127.0.0.1:{free_port()}")
    controller = Controller(1, voters, listen=("127.0.0.1", free_port()), password=SECRET, endpoint_auth=True)
    controller.start()
    try:
        wait_for("a one-node group's leader", controller.is_active)
        yield controller
    finally:
        controller.stop()


TOPIC = {"command": "CreateTopic", "name": "t", "partitions": 1, "replication_factor": 1}


def test_a_client_without_the_secret_is_refused_and_changes_nothing(guarded):
    from freshet.controller.client import ControllerClient

    before = guarded.metadata()
    for request in [{"op": "command", "command": TOPIC}, {"op": "metadata"}, {"op": "status"}, [1]]:
        with ControllerClient(guarded.endpoint, timeout=30, password="") as client:
            answer = client.request(request)
            assert (answer["error"], answer["error_code"]) == ("CLUSTER_AUTHORIZATION_FAILED", 31), answer
            assert "needs the cluster secret" in answer["message"]
            with pytest.raises(ConnectionError):  # and the connection is closed
                client.request({"op": "status"})
    assert guarded.metadata() == before


def test_a_client_with_the_secret_is_served_and_one_with_another_is_refused(guarded):
    import asyncio

    from freshet.controller.client import AsyncControllerClient, ControllerClient

    with ControllerClient(guarded.endpoint, timeout=30, password=SECRET) as client:
        assert client.command({"command": "RegisterBroker", "broker_id": 1, "incarnation_id": "i",
                               "host": "127.0.0.1", "port": 9092})["error"] == "NONE"
        assert [b["broker_id"] for b in client.metadata()["brokers"]] == [1]

    async def metadata():
        client = AsyncControllerClient([guarded.endpoint], timeout=30, password=SECRET)
        try:
            return await client.request({"op": "metadata"})
        finally:
            await client.close()

    assert [b["broker_id"] for b in asyncio.run(metadata())["brokers"]] == [1]
    before = guarded.metadata()
    with ControllerClient(guarded.endpoint, timeout=30, password="another secret of the cluster") as client:
        with pytest.raises(PermissionError, match="does not know the cluster secret"):
            client.command({"command": "UnregisterBroker", "broker_id": 1})
    assert guarded.metadata() == before


def test_a_wrong_proof_is_refused_and_the_connection_closed(guarded):
    import json

    with socket.create_connection(guarded.endpoint, timeout=30) as sock, sock.makefile("rb") as lines:
        sock.sendall(json.dumps({"op": "hello", "nonce": "0" * 32}).encode() + b"\n")
        hello = json.loads(lines.readline())
        assert hello["auth"] is True and len(hello["nonce"]) == 32
        sock.sendall(json.dumps({"op": "auth", "proof": hello["proof"]}).encode() + b"\n")  # the server's own back
        assert json.loads(lines.readline())["error"] == "CLUSTER_AUTHORIZATION_FAILED"
        assert lines.readline() == b""  # closed


def test_endpoint_auth_needs_the_secret_and_a_client_with_it_still_talks_to_an_open_endpoint():
    from freshet.controller.client import ControllerClient

    voters = parse_voters(f"1@127.0.0.1:{free_port()}")
    with pytest.raises(ValueError, match="endpoint authentication needs the cluster secret"):
        Controller(1, voters, listen=("127.0.0.1", free_port()), endpoint_auth=True)
    controller = Controller(1, voters, listen=("127.0.0.1", free_port()), password=SECRET).start()
    try:
        wait_for("a one-node group's leader", controller.is_active)
        with ControllerClient(controller.endpoint, timeout=30, password=SECRET) as client:
            status = client.status()
        assert status["raft_encrypted"] and not status["endpoint_auth"]
    finally:
        controller.stop()
