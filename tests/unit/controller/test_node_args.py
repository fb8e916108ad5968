"""The controller process's arguments and what a proposer fills into a command."""

import random

import pytest

from freshet.controller import commands as c
from freshet.controller.__main__ import main
from freshet.controller.node import Controller, Voter, complete, parse_voters


def test_voters_in_kafkas_quorum_voters_form():
    assert parse_voters("1@127.0.0.1:9101, 2@localhost:9102") == [
        Voter(1, "127.0.0.1", 9101), Voter(2, "localhost", 9102)]


@pytest.mark.parametrize("text", ["", "1@127.0.0.1", "x@h:1", "1@h:1,1@h:2", "1-h:1"])
def test_bad_voters_are_named(text):
    with pytest.raises(ValueError, match="ID@HOST:PORT"):
        parse_voters(text)


def test_a_node_id_outside_the_voters_is_refused():
    with pytest.raises(ValueError, match="node id 4 is not among the voters"):
        Controller(4, parse_voters("1@127.0.0.1:1,2@127.0.0.1:2"))


@pytest.mark.parametrize("argv, message", [
    (["--node-id", "4", "--voters", "1@127.0.0.1:1", "--listen", "127.0.0.1:0"], "node id 4 is not among"),
    (["--node-id", "1", "--voters", "1@127.0.0.1", "--listen", "127.0.0.1:0"], "is not ID@HOST:PORT"),
])
def test_the_process_says_what_is_wrong_in_one_line_and_exits_1(argv, message, capsys):
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_a_bad_listen_address_is_an_argument_error(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--node-id", "1", "--voters", "1@127.0.0.1:1", "--listen", "nowhere"])
    assert exit.value.code == 2 and "is not HOST:PORT" in capsys.readouterr().err


def test_the_proposer_fills_in_time_and_the_placers_choices_but_keeps_what_was_given():
    rng = random.Random(7)
    topic = c.from_dict(complete({"command": "CreateTopic", "name": "t", "partitions": 1,
                                  "replication_factor": 1}, 1234, rng, 6000))
    assert topic.topic_id and 0 <= topic.start_index < 1 << 16 and 0 <= topic.shift < 1 << 16
    other = c.from_dict(complete({"command": "CreateTopic", "name": "u", "partitions": 1,
                                  "replication_factor": 1}, 1234, rng, 6000))
    assert other.topic_id != topic.topic_id
    beat = c.from_dict(
        complete({"command": "BrokerHeartbeat", "broker_id": 1, "broker_epoch": 1}, 1234, rng, 6000))
    assert beat.now_ms == 1234
    registration = c.from_dict(complete({"command": "RegisterBroker", "broker_id": 1, "incarnation_id": "i",
                                         "host": "h", "port": 1}, 1234, rng, 6000))
    assert (registration.now_ms, registration.session_timeout_ms) == (1234, 6000)
    chosen = c.from_dict(complete({"command": "RegisterBroker", "broker_id": 1, "incarnation_id": "i", "host": "h",
                                   "port": 1, "session_timeout_ms": 10 ** 9}, 1234, rng, 6000))
    assert chosen.session_timeout_ms == 6000  # a broker cannot choose a session that never expires
    given = complete({"command": "FenceStaleBrokers", "now_ms": 5, "session_timeout_ms": 1}, 1234, rng, 6000)
    assert given["now_ms"] == 5
