"""The controller's JSON endpoint on a one-node group (in this process): bad requests are named and change
nothing; commands and snapshots go through it."""

import socket
import time

import pytest

from freshet.controller.client import ControllerClient
from freshet.controller.node import ConflictOnlyTruncation, Controller, DurableJournal, parse_voters
from freshet.local import free_port


@pytest.fixture
def endpoint():
    controller = Controller(1, parse_voters(f"1@127.0.0.1:{free_port()}"), listen=("127.0.0.1", free_port()))
    controller.start()
    try:
        end = time.monotonic() + 60
        while not controller.is_active():
            assert time.monotonic() < end, "a one-node group elected no leader in 60 s"
            time.sleep(0.05)
        with ControllerClient(controller.endpoint) as client:
            yield client
    finally:
        controller.stop()


def test_commands_and_the_snapshot(endpoint):
    registered = endpoint.command({"command": "RegisterBroker", "broker_id": 5, "incarnation_id": "i",
                                   "host": "127.0.0.1", "port": 9092, "rack": "r1"})
    assert registered["error"] == "NONE" and registered["error_code"] == 0
    snapshot = endpoint.metadata()
    assert snapshot["controller_id"] == 1 and snapshot["node_id"] == 1
    [broker] = snapshot["brokers"]
    assert (broker["broker_id"], broker["rack"], broker["fenced"]) == (5, "r1", True)
    status = endpoint.status()
    assert status["active"] and status["controller_id"] == 1 and status["peers_connected"] == 0


@pytest.mark.parametrize("request_, message", [
    ({"op": "command", "command": {"command": "Nope"}}, "unknown command 'Nope'"),
    ({"op": "command", "command": {"command": "DeleteTopic", "name": "t", "x": 1}}, "unknown field(s) x"),
    ({"op": "command", "command": {"command": "DeleteTopic"}}, "DeleteTopic"),
    ({"op": "command", "command": {"command": "LeaderChange", "node_id": 1, "term": 99}}, "not by a client"),
    ({"op": "command", "command": {"command": "DeleteTopic", "name": ["t"]}}, "name must be a string"),
    ({"op": "command"}, "op must be"),
    ({"op": "drop everything"}, "op must be"),
    ([1, 2], "op must be"),
])
def test_bad_requests_are_named_and_change_nothing(endpoint, request_, message):
    before = endpoint.metadata()
    answer = endpoint.request(request_)
    assert (answer["error"], answer["error_code"]) == ("INVALID_REQUEST", 42)
    assert message in answer["message"]
    assert endpoint.metadata() == before


def test_a_line_that_is_not_json_is_answered_and_the_connection_goes_on(endpoint):
    with socket.create_connection(endpoint.address, timeout=30) as sock, sock.makefile("rb") as lines:
        sock.sendall(b"{not json\n")
        assert b'"INVALID_REQUEST"' in lines.readline()
        sock.sendall(b'{"op": "status"}\n')
        assert b'"active": true' in lines.readline()


def test_a_node_with_a_data_directory_comes_back_with_its_metadata(tmp_path):
    voters = parse_voters(f"1@127.0.0.1:{free_port()}")

    def run(check):
        controller = Controller(1, voters, listen=("127.0.0.1", free_port()), data_dir=str(tmp_path))
        controller.start()
        try:
            journal = controller._sync._SyncObj__raftLog  # Raft's truncation rule over the durable journal
            assert isinstance(journal, ConflictOnlyTruncation) and isinstance(journal._inner, DurableJournal)
            end = time.monotonic() + 60
            while not controller.is_active():
                assert time.monotonic() < end, "a one-node group elected no leader in 60 s"
                time.sleep(0.05)
            return check(controller)
        finally:
            controller.stop()

    created = run(lambda c: c.propose_dict({"command": "UpsertScramCredential", "user": "alice",
                                            "mechanism": "SCRAM-SHA-256", "iterations": 4096, "salt": "c2FsdA==",
                                            "stored_key": "a2V5", "server_key": "c2Vy"}))
    assert created.ok, created
    assert run(lambda c: c.metadata()["users"]) == {"alice": ["SCRAM-SHA-256"]}


def test_a_metadata_long_poll_answers_once_the_metadata_changes_and_heartbeats_do_not_wake_it(endpoint):
    import threading

    first = endpoint.metadata()
    registered = endpoint.command({"command": "RegisterBroker", "broker_id": 1, "incarnation_id": "i",
                                   "host": "127.0.0.1", "port": 9092})
    changed = endpoint.request({"op": "metadata", "since": first["version"], "wait_ms": 0})
    assert changed["version"] != first["version"] and [b["broker_id"] for b in changed["brokers"]] == [1]
    epoch = registered["value"]["broker_epoch"]
    assert endpoint.command({"command": "BrokerHeartbeat", "broker_id": 1, "broker_epoch": epoch})["value"] == {
        "fenced": False}
    unfenced = endpoint.request({"op": "metadata", "since": changed["version"], "wait_ms": 0})
    assert unfenced["version"] != changed["version"]  # unfencing is a change a broker must see
    assert endpoint.command({"command": "BrokerHeartbeat", "broker_id": 1, "broker_epoch": epoch})["error"] == "NONE"
    # a heartbeat that changes no fencing does not move the version: a poll given it waits its whole time out
    same = endpoint.request({"op": "metadata", "since": unfenced["version"], "wait_ms": 200})
    assert same["version"] == unfenced["version"]
    answers = []
    with ControllerClient(endpoint.address) as poller:
        waiting = threading.Thread(target=lambda: answers.append(
            poller.request({"op": "metadata", "since": same["version"], "wait_ms": 30_000})))
        waiting.start()
        assert endpoint.command({"command": "AlterConfigs", "resource_type": "broker", "name": "",
                                 "set": {"min.insync.replicas": "2"}})["error"] == "NONE"
        waiting.join(60)
    assert answers and answers[0]["broker_configs"] == {"": {"min.insync.replicas": "2"}}
    bad = endpoint.request({"op": "metadata", "since": "x"})
    assert (bad["error"], bad["error_code"]) == ("INVALID_REQUEST", 42)


def test_a_brokers_session_connection_closing_fences_it_at_once(endpoint):
    session = ControllerClient(endpoint.address)
    registered = session.request({"op": "command", "session": True, "command": {
        "command": "RegisterBroker", "broker_id": 3, "incarnation_id": "first", "host": "127.0.0.1", "port": 1}})
    epoch = registered["value"]["broker_epoch"]
    beat = session.request({"op": "command", "session": True, "command": {
        "command": "BrokerHeartbeat", "broker_id": 3, "broker_epoch": epoch}})
    assert beat["value"] == {"fenced": False}
    # a tool's connection (no session) closing fences nobody
    with ControllerClient(endpoint.address) as tool:
        assert tool.command({"command": "BrokerHeartbeat", "broker_id": 3, "broker_epoch": epoch})["error"] == "NONE"
    assert not endpoint.metadata()["brokers"][0]["fenced"]
    duplicate = endpoint.command({"command": "RegisterBroker", "broker_id": 3, "incarnation_id": "second",
                                  "host": "127.0.0.1", "port": 2})
    assert (duplicate["error"], duplicate["error_code"]) == ("DUPLICATE_BROKER_REGISTRATION", 101)
    session.close()  # what kill -9 of the broker does to its socket
    end = time.monotonic() + 60
    while not endpoint.metadata()["brokers"][0]["fenced"]:
        assert time.monotonic() < end, "the broker was not fenced after its session closed"
        time.sleep(0.05)
    again = endpoint.command({"command": "RegisterBroker", "broker_id": 3, "incarnation_id": "second",
                              "host": "127.0.0.1", "port": 2})
    assert again["error"] == "NONE" and again["value"]["broker_epoch"] > epoch
