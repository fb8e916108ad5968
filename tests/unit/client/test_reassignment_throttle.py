"""``freshet topic reassign --throttle`` against a plan naming a topic or partition the cluster does not have: the
move is refused (UNKNOWN_TOPIC_OR_PARTITION) and nothing is left behind, neither a broker's rate nor a topic's
throttled replicas, and the one line says why the plan was refused. The cluster is a stand-in that answers as a
broker does (IncrementalAlterConfigs on an unknown topic fails)."""

import json
from types import SimpleNamespace

from click.testing import CliRunner

from freshet.cli.topic_cmd import topic
from freshet.client.errors import ClientError
from freshet.client.reassignment import ReassignmentAdmin, ReassignmentRefused

REPLICAS = {("orders", 0): [1, 2], ("orders", 1): [2, 3]}  # what the stand-in cluster has


def stand_in(monkeypatch) -> dict:
    """A three-broker cluster with topic orders (2 partitions): the configs set on it."""
    configs: dict[tuple[str, str], dict[str, str]] = {}

    def alter_configs(self, changes):
        failed = [name for (kind, name) in changes if kind == "topic" and name not in {t for t, _ in REPLICAS}]
        for (kind, name), values in changes.items():
            if name in failed:
                continue
            current = configs.setdefault((kind, name), {})
            for key, value in values.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value
            if not current:
                del configs[(kind, name)]
        if failed:
            raise ClientError("throttle not set: " + "; ".join(f"{n}: UNKNOWN_TOPIC_OR_PARTITION" for n in failed))

    def alter(self, plan):
        refused = {key for key in plan if key not in REPLICAS}
        if refused:
            error = ReassignmentRefused("; ".join(f"{t}-{p}: UNKNOWN_TOPIC_OR_PARTITION (no partition {t}-{p})"
                                                  for t, p in sorted(refused)))
            error.refused = refused
            raise error
        return {key: None for key in plan}

    monkeypatch.setattr(ReassignmentAdmin, "_alter_configs", alter_configs)
    monkeypatch.setattr(ReassignmentAdmin, "alter", alter)
    topics = {}
    for (name, index), replicas in REPLICAS.items():
        topics.setdefault(name, SimpleNamespace(partitions={})).partitions[index] = SimpleNamespace(replicas=replicas)
    metadata = SimpleNamespace(topics=topics, brokers={b: None for b in (1, 2, 3)})
    monkeypatch.setattr(ReassignmentAdmin, "_metadata", lambda self: metadata)
    return configs


def reassign(tmp_path, partitions, *args):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for t, p, r in partitions]}))
    return CliRunner().invoke(topic, ["reassign", "--plan", str(plan), *args, "--bootstrap", "127.0.0.1:1"])


def test_a_throttled_plan_of_a_topic_that_does_not_exist_is_refused_and_leaves_no_throttle(monkeypatch, tmp_path):
    configs = stand_in(monkeypatch)
    result = reassign(tmp_path, [("nope", 0, [1, 2])], "--throttle", "5000")
    assert result.exit_code == 1
    assert result.output.splitlines() == ["error: nope-0: UNKNOWN_TOPIC_OR_PARTITION (no partition nope-0)"]
    assert configs == {}


def test_a_throttled_plan_with_one_unknown_partition_throttles_the_others_only(monkeypatch, tmp_path):
    configs = stand_in(monkeypatch)
    result = reassign(tmp_path, [("orders", 0, [2, 3]), ("orders", 7, [1, 3])], "--throttle", "5000")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == "error: orders-7: UNKNOWN_TOPIC_OR_PARTITION (no partition orders-7)"
    # orders-0 moves from [1, 2] to [2, 3]: its current replicas throttled as leaders, broker 3 as a follower
    assert configs[("topic", "orders")] == {"leader.replication.throttled.replicas": "0:1,0:2",
                                            "follower.replication.throttled.replicas": "0:3"}
    assert sorted(name for kind, name in configs if kind == "broker") == ["1", "2", "3"]


def test_status_of_a_plan_naming_a_topic_since_deleted_still_removes_the_throttle(monkeypatch, tmp_path):
    configs = stand_in(monkeypatch)
    assert reassign(tmp_path, [("orders", 0, [2, 3])], "--throttle", "5000").exit_code == 0
    assert configs
    monkeypatch.setattr(ReassignmentAdmin, "ongoing", lambda self, name=None: [])
    monkeypatch.setattr(ReassignmentAdmin, "progress", lambda self, moving: moving)
    result = reassign(tmp_path, [("orders", 0, [2, 3]), ("gone", 0, [1])], "--status")
    assert result.exit_code == 0, result.output
    assert "throttle removed (if one was set)" in result.output
    assert configs == {}


def moving(*keys):
    from freshet.client.reassignment import Moving

    return lambda self, name=None: [Moving(t, p, [9, *REPLICAS[(t, p)]], [9], list(REPLICAS[(t, p)]))
                                    for t, p in keys if name is None or t == name]


def test_cancel_of_a_plan_cancels_its_moves_in_progress_and_removes_the_throttle(monkeypatch, tmp_path):
    # as kafka-reassign-partitions --cancel: the plan's partitions still moving are cancelled (one done already is
    # not an error) and the throttle goes (--preserve-throttles is not offered)
    configs = stand_in(monkeypatch)
    cancelled = []
    monkeypatch.setattr(ReassignmentAdmin, "alter", lambda self, plan: cancelled.append(plan) or {})
    plan = [("orders", 0, [2, 3]), ("orders", 1, [3, 1])]
    assert reassign(tmp_path, plan, "--throttle", "5000").exit_code == 0 and configs
    monkeypatch.setattr(ReassignmentAdmin, "ongoing", moving(("orders", 1)))  # orders-0's move is done
    result = reassign(tmp_path, plan, "--cancel")
    assert result.exit_code == 0, result.output
    assert cancelled[-1] == {("orders", 1): None}
    assert result.output.splitlines() == ["cancelled the reassignment of 1 partition: orders-1",
                                          "throttle removed (if one was set)"]
    assert configs == {}
    monkeypatch.setattr(ReassignmentAdmin, "ongoing", moving())
    nothing = reassign(tmp_path, plan, "--cancel")
    assert nothing.exit_code == 1
    assert nothing.output == "error: no reassignment of the plan's partitions is in progress\n"
