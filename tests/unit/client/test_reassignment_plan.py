"""kafka-reassign-partitions.sh's plan format, as ``freshet topic reassign --plan`` reads it: what it takes and the
one line it answers a file that is not such a plan."""

import json

import pytest

from freshet.client.errors import ClientError
from freshet.client.reassignment import parse_plan, read_plan


def test_a_plan_of_kafkas_tool_is_read_with_its_log_dirs_ignored(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "a", "partition": 0, "replicas": [2, 3], "log_dirs": ["any", "any"]},
        {"topic": "b", "partition": 1, "replicas": [1]}]}))
    assert read_plan(str(path)) == {("a", 0): [2, 3], ("b", 1): [1]}
    assert read_plan(str(path), topic="b") == {("b", 1): [1]}


@pytest.mark.parametrize("data, message", [
    ([], "expected {"),
    ({"version": 2, "partitions": []}, "version 2 is not 1"),
    ({"partitions": [{"topic": "a", "replicas": [1]}]}, "partitions[0] needs"),
    ({"partitions": [{"topic": "a", "partition": "0", "replicas": [1]}]}, "partitions[0] needs"),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": ["1"]}]}, "partitions[0] needs"),
    ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1]}] * 2}, "a-0 is in the plan twice"),
    ({"partitions": []}, "no partition to move"),
])
def test_what_is_not_a_plan_is_named(data, message):
    with pytest.raises(ClientError, match=message.replace("[", r"\[").replace("{", r"\{")):
        parse_plan(data)


def test_a_file_that_is_not_json(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("{nope")
    with pytest.raises(ClientError, match="not JSON"):
        read_plan(str(path))
    with pytest.raises(ClientError, match="no partition of topic c to move"):
        parse_plan({"partitions": [{"topic": "a", "partition": 0, "replicas": [1]}]}, topic="c")
