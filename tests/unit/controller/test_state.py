"""The controller's state machine: every command, and every refusal (Kafka's error name, nothing changed)."""

import copy
import pickle

import pytest

from freshet.controller import commands as c
from freshet.controller.state import NO_LEADER, ClusterMetadata, place_replicas

SESSION = 9000


def register(m: ClusterMetadata, broker_id: int, now_ms: int = 1000, incarnation: str | None = None) -> int:
    result = m.apply(c.RegisterBroker(broker_id, incarnation or f"inc-{broker_id}", "127.0.0.1", 9090 + broker_id,
                                      now_ms, rack=None, session_timeout_ms=SESSION))
    assert result.ok, result
    return result.value["broker_epoch"]


def cluster(n: int = 3, now_ms: int = 1000) -> tuple[ClusterMetadata, dict[int, int]]:
    m = ClusterMetadata()
    epochs = {}
    for b in range(1, n + 1):
        epochs[b] = register(m, b, now_ms)
        assert m.apply(c.BrokerHeartbeat(b, epochs[b], now_ms)).ok
    return m, epochs


def create(m: ClusterMetadata, name: str = "t", partitions: int = 3, rf: int = 3, **configs) -> str:
    topic_id = f"id-{name}"
    result = m.apply(c.CreateTopic(name, topic_id, partitions, rf, start_index=0, shift=0, configs=configs))
    assert result.ok, result
    return topic_id


def refused(m: ClusterMetadata, command, error: str):
    """Applies a command that must be refused with ``error`` and checks nothing changed."""
    before = pickle.dumps(m.snapshot())
    result = m.apply(command)
    assert result.error == error, result
    assert result.error_code > 0 and result.message
    assert pickle.dumps(m.snapshot()) == before
    return result


def partition(m: ClusterMetadata, topic_id: str, p: int):
    return m.topics[topic_id].partitions[p]


# -- the active controller -----------------------------------------------------------------------------------
def test_leader_change_records_the_active_controller_and_refuses_an_old_term():
    m = ClusterMetadata()
    assert m.apply(c.LeaderChange(2, 3)).ok
    assert (m.controller_id, m.controller_epoch, m.snapshot()["controller_epoch"]) == (2, 3, 3)
    refused(m, c.LeaderChange(1, 3), "STALE_CONTROLLER_EPOCH")
    refused(m, c.LeaderChange(1, 2), "STALE_CONTROLLER_EPOCH")
    assert m.apply(c.LeaderChange(1, 4)).ok and m.controller_id == 1


# -- brokers -------------------------------------------------------------------------------------------------
def test_register_gives_increasing_epochs_and_a_fenced_broker_until_its_heartbeat():
    m = ClusterMetadata()
    e1 = register(m, 1)
    e2 = register(m, 2)
    assert e2 > e1
    assert m.brokers[1].fenced and m.unfenced() == []
    assert m.apply(c.BrokerHeartbeat(1, e1, 2000)).value == {"fenced": False}
    assert m.unfenced() == [1]
    assert m.brokers[1].last_heartbeat_ms == 2000


def test_register_retry_of_the_same_incarnation_keeps_its_epoch():
    m = ClusterMetadata()
    e1 = register(m, 1, incarnation="same")
    assert register(m, 1, now_ms=1500, incarnation="same") == e1


def test_second_broker_with_the_same_id_while_the_first_is_alive_is_refused():
    m, _ = cluster(1)
    refused(m, c.RegisterBroker(1, "another", "h", 1, now_ms=1000 + SESSION - 1, session_timeout_ms=SESSION),
            "DUPLICATE_BROKER_REGISTRATION")


def test_a_new_incarnation_after_the_session_expired_replaces_the_broker_and_moves_its_leaderships():
    m, epochs = cluster(3)
    tid = create(m, partitions=3, rf=3)
    led_by_1 = [p for p in m.topics[tid].partitions if p.leader == 1]
    e = register(m, 1, now_ms=1000 + SESSION + 1, incarnation="restarted")
    assert e > epochs[1] and m.brokers[1].fenced and m.brokers[1].incarnation_id == "restarted"
    assert all(p.leader != 1 and 1 not in p.isr for p in led_by_1)


def test_register_negative_id_is_refused():
    refused(ClusterMetadata(), c.RegisterBroker(-1, "x", "h", 1, 0), "INVALID_REQUEST")


def test_heartbeat_of_unknown_broker_or_stale_epoch_is_refused():
    m, epochs = cluster(1)
    refused(m, c.BrokerHeartbeat(7, 1, 2000), "BROKER_ID_NOT_REGISTERED")
    refused(m, c.BrokerHeartbeat(1, epochs[1] + 100, 2000), "STALE_BROKER_EPOCH")


def test_heartbeat_wanting_fence_fences():
    m, epochs = cluster(2)
    assert m.apply(c.BrokerHeartbeat(2, epochs[2], 2000, want_fence=True)).value == {"fenced": True}
    assert m.unfenced() == [1]


def test_unregister_fences_and_removes():
    m, _ = cluster(3)
    tid = create(m, partitions=1, rf=3)
    assert m.apply(c.UnregisterBroker(1)).ok
    assert 1 not in m.brokers and partition(m, tid, 0).leader == 2
    refused(m, c.UnregisterBroker(1), "BROKER_ID_NOT_REGISTERED")


# -- fencing and leadership ----------------------------------------------------------------------------------
def test_fence_stale_brokers_moves_leadership_to_the_next_isr_member_and_bumps_epochs():
    m, epochs = cluster(3, now_ms=1000)
    tid = create(m, partitions=1, rf=3)
    p = partition(m, tid, 0)
    assert p.replicas == [1, 2, 3] and p.leader == 1
    for b in (2, 3):
        assert m.apply(c.BrokerHeartbeat(b, epochs[b], 8000)).ok
    result = m.apply(c.FenceStaleBrokers(now_ms=1000 + SESSION + 1, session_timeout_ms=SESSION))
    assert result.value == {"fenced": [1]}
    assert m.brokers[1].fenced
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, [2, 3], 1, 1)


def test_fence_stale_brokers_with_none_stale_changes_nothing_but_the_offset():
    m, _ = cluster(3)
    create(m)
    before = m.snapshot()
    assert m.apply(c.FenceStaleBrokers(now_ms=1000 + SESSION, session_timeout_ms=SESSION)).value == {"fenced": []}
    after = m.snapshot()
    assert after["offset"] == before["offset"] + 1
    assert {**after, "offset": 0} == {**before, "offset": 0}


def test_fencing_a_follower_shrinks_the_isr_without_changing_the_leader_epoch():
    m, epochs = cluster(3)
    tid = create(m, partitions=1, rf=3)
    m.apply(c.BrokerHeartbeat(3, epochs[3], 2000, want_fence=True))
    p = partition(m, tid, 0)
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (1, [1, 2], 0, 1)


def test_the_last_isr_member_stays_in_the_isr_and_the_partition_goes_offline_then_comes_back():
    m, epochs = cluster(2)
    tid = create(m, partitions=1, rf=2)
    m.apply(c.BrokerHeartbeat(2, epochs[2], 2000, want_fence=True))
    m.apply(c.BrokerHeartbeat(1, epochs[1], 2000, want_fence=True))
    p = partition(m, tid, 0)
    assert (p.leader, p.isr) == (NO_LEADER, [1])  # unclean election is off: 2 left the ISR, it may not lead
    m.apply(c.BrokerHeartbeat(2, epochs[2], 3000))
    assert p.leader == NO_LEADER  # 2 is alive but not in the ISR
    epoch = p.leader_epoch
    m.apply(c.BrokerHeartbeat(1, epochs[1], 3000))
    assert (p.leader, p.leader_epoch) == (1, epoch + 1)


@pytest.mark.parametrize("where", ["topic", "cluster"])
def test_unclean_leader_election_enable_lets_a_live_replica_outside_the_isr_lead(where):
    m, epochs = cluster(2)
    configs = {"unclean.leader.election.enable": "true"}
    if where == "cluster":
        assert m.apply(c.AlterConfigs("broker", "", configs)).ok
        configs = {}
    tid = create(m, partitions=1, rf=2, **configs)
    m.apply(c.BrokerHeartbeat(2, epochs[2], 2000, want_fence=True))
    m.apply(c.BrokerHeartbeat(1, epochs[1], 2000, want_fence=True))
    p = partition(m, tid, 0)
    assert (p.leader, p.isr) == (NO_LEADER, [1])
    m.apply(c.BrokerHeartbeat(2, epochs[2], 3000))
    assert (p.leader, p.isr, p.leader_epoch) == (2, [2], 2)


def test_unclean_election_picks_a_live_replica_outside_the_isr_only_when_asked():
    m, epochs = cluster(2)
    tid = create(m, partitions=1, rf=2)
    m.apply(c.BrokerHeartbeat(2, epochs[2], 2000, want_fence=True))
    m.apply(c.BrokerHeartbeat(1, epochs[1], 2000, want_fence=True))
    refused(m, c.ElectLeaders("t", 0, "unclean"), "ELIGIBLE_LEADERS_NOT_AVAILABLE")
    m.apply(c.BrokerHeartbeat(2, epochs[2], 3000))
    result = m.apply(c.ElectLeaders("t", 0, "unclean"))
    assert result.ok and partition(m, tid, 0).leader == 2 and partition(m, tid, 0).isr == [2]
    refused(m, c.ElectLeaders("t", 0, "unclean"), "ELECTION_NOT_NEEDED")


def test_preferred_election_and_its_refusals():
    m, epochs = cluster(3)
    tid = create(m, partitions=1, rf=3)
    refused(m, c.ElectLeaders("t", 0), "ELECTION_NOT_NEEDED")
    m.apply(c.BrokerHeartbeat(1, epochs[1], 2000, want_fence=True))
    refused(m, c.ElectLeaders("t", 0), "PREFERRED_LEADER_NOT_AVAILABLE")
    refused(m, c.ElectLeaders("t", 5), "UNKNOWN_TOPIC_OR_PARTITION")
    refused(m, c.ElectLeaders("nope", 0), "UNKNOWN_TOPIC_OR_PARTITION")
    refused(m, c.ElectLeaders("t", 0, "sideways"), "INVALID_REQUEST")
    m.apply(c.BrokerHeartbeat(1, epochs[1], 3000))  # back, but out of the ISR
    p = partition(m, tid, 0)
    assert m.apply(c.AlterPartition(2, epochs[2], tid, 0, p.leader_epoch, p.partition_epoch, (2, 3, 1))).ok
    result = m.apply(c.ElectLeaders("t", 0))
    assert result.ok and p.leader == 1 and p.isr == [1, 2, 3]


# -- topics --------------------------------------------------------------------------------------------------
def test_create_topic_places_replicas_round_robin_with_all_replicas_in_the_isr():
    m, _ = cluster(3)
    tid = create(m, partitions=6, rf=2, **{"min.insync.replicas": "2"})
    parts = m.topics[tid].partitions
    assert [p.replicas for p in parts] == place_replicas([1, 2, 3], 6, 2, 0, 0)
    assert all(p.isr == p.replicas and p.leader == p.replicas[0] and p.leader_epoch == 0 for p in parts)
    assert sorted(p.leader for p in parts) == [1, 1, 2, 2, 3, 3]
    assert m.topic_configs["t"] == {"min.insync.replicas": "2"}


def test_placement_follows_kafkas_rack_unaware_assignment():
    # Kafka's AdminUtilsTest: 5 brokers, 10 partitions, RF 3, start index 0, shift 0
    assert place_replicas([0, 1, 2, 3, 4], 10, 3, 0, 0) == [
        [0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1],
        [0, 2, 3], [1, 3, 4], [2, 4, 0], [3, 0, 1], [4, 1, 2],
    ]
    for start in range(4):
        for shift in range(4):
            for replicas in place_replicas([1, 2, 3, 4], 8, 3, start, shift):
                assert len(set(replicas)) == 3


def test_create_topic_refusals():
    m, epochs = cluster(2)
    create(m, "t", partitions=1, rf=1)
    refused(m, c.CreateTopic("t", "id-x", 1, 1, 0, 0), "TOPIC_ALREADY_EXISTS")
    refused(m, c.CreateTopic("u", "id-t", 1, 1, 0, 0), "INVALID_REQUEST")
    refused(m, c.CreateTopic("u", "id-u", 0, 1, 0, 0), "INVALID_PARTITIONS")
    refused(m, c.CreateTopic("u", "id-u", 1, 3, 0, 0), "INVALID_REPLICATION_FACTOR")
    refused(m, c.CreateTopic("u", "id-u", 1, 0, 0, 0), "INVALID_REPLICATION_FACTOR")
    refused(m, c.CreateTopic("bad name", "id-u", 1, 1, 0, 0), "INVALID_TOPIC_EXCEPTION")
    refused(m, c.CreateTopic("..", "id-u", 1, 1, 0, 0), "INVALID_TOPIC_EXCEPTION")
    refused(m, c.CreateTopic("u", "id-u", 1, 1, 0, 0, {"min.insync.replicas": "0"}), "INVALID_CONFIG")
    refused(m, c.CreateTopic("u", "id-u", 1, 1, 0, 0, {"unclean.leader.election.enable": "yes"}), "INVALID_CONFIG")
    m.apply(c.BrokerHeartbeat(2, epochs[2], 2000, want_fence=True))
    refused(m, c.CreateTopic("u", "id-u", 1, 2, 0, 0), "INVALID_REPLICATION_FACTOR")  # fenced brokers don't count


def test_delete_topic():
    m, _ = cluster(1)
    tid = create(m, rf=1, **{"retention.ms": "1"})
    assert m.apply(c.DeleteTopic("t")).ok
    assert tid not in m.topics and "t" not in m.topic_configs
    refused(m, c.DeleteTopic("t"), "UNKNOWN_TOPIC_OR_PARTITION")


# -- AlterPartition ------------------------------------------------------------------------------------------
def test_alter_partition_by_the_leader_changes_the_isr_and_bumps_the_partition_epoch():
    m, epochs = cluster(3)
    tid = create(m, partitions=1, rf=3)
    result = m.apply(c.AlterPartition(1, epochs[1], tid, 0, 0, 0, (1, 3)))
    assert result.value == {"isr": [1, 3], "partition_epoch": 1}
    result = m.apply(c.AlterPartition(1, epochs[1], tid, 0, 0, 1, (3, 2, 1)))
    assert result.value == {"isr": [1, 2, 3], "partition_epoch": 2}  # kept in replica order
    assert partition(m, tid, 0).leader_epoch == 0


def test_alter_partition_refusals():
    m, epochs = cluster(3)
    tid = create(m, partitions=1, rf=3)
    refused(m, c.AlterPartition(1, epochs[1] + 50, tid, 0, 0, 0, (1, 2)), "STALE_BROKER_EPOCH")
    refused(m, c.AlterPartition(9, 1, tid, 0, 0, 0, (1, 2)), "BROKER_ID_NOT_REGISTERED")
    refused(m, c.AlterPartition(1, epochs[1], "no-such-id", 0, 0, 0, (1, 2)), "UNKNOWN_TOPIC_ID")
    refused(m, c.AlterPartition(1, epochs[1], tid, 3, 0, 0, (1, 2)), "UNKNOWN_TOPIC_OR_PARTITION")
    refused(m, c.AlterPartition(2, epochs[2], tid, 0, 0, 0, (1, 2)), "NOT_LEADER_OR_FOLLOWER")
    refused(m, c.AlterPartition(1, epochs[1], tid, 0, 1, 0, (1, 2)), "FENCED_LEADER_EPOCH")
    refused(m, c.AlterPartition(1, epochs[1], tid, 0, 0, 7, (1, 2)), "INVALID_UPDATE_VERSION")
    refused(m, c.AlterPartition(1, epochs[1], tid, 0, 0, 0, (2, 3)), "INVALID_REQUEST")  # without the leader
    refused(m, c.AlterPartition(1, epochs[1], tid, 0, 0, 0, (1, 1)), "INVALID_REQUEST")
    refused(m, c.AlterPartition(1, epochs[1], tid, 0, 0, 0, (1, 4)), "INVALID_REQUEST")  # not a replica
    m.apply(c.BrokerHeartbeat(3, epochs[3], 2000, want_fence=True))
    p = partition(m, tid, 0)
    refused(m, c.AlterPartition(1, epochs[1], tid, 0, 0, p.partition_epoch, (1, 2, 3)), "INELIGIBLE_REPLICA")


def test_a_deposed_leader_is_fenced_by_its_old_leader_epoch():
    m, epochs = cluster(3)
    tid = create(m, partitions=1, rf=3)
    m.apply(c.BrokerHeartbeat(1, epochs[1], 2000, want_fence=True))  # leadership moves to 2, epoch 1
    m.apply(c.BrokerHeartbeat(1, epochs[1], 3000))  # 1 is back but no longer leads
    refused(m, c.AlterPartition(1, epochs[1], tid, 0, 0, 0, (1, 2, 3)), "NOT_LEADER_OR_FOLLOWER")
    p = partition(m, tid, 0)
    refused(m, c.AlterPartition(2, epochs[2], tid, 0, 0, p.partition_epoch, (2, 3, 1)), "FENCED_LEADER_EPOCH")
    assert m.apply(c.AlterPartition(2, epochs[2], tid, 0, 1, p.partition_epoch, (2, 3, 1))).ok


# -- configs, users, ACLs, quotas ----------------------------------------------------------------------------
def test_alter_configs_of_topics_and_brokers():
    m, _ = cluster(2)
    create(m, rf=2, **{"retention.ms": "10"})
    assert m.apply(c.AlterConfigs("topic", "t", {"min.insync.replicas": "2"}, ("retention.ms",))).ok
    assert m.topic_configs["t"] == {"min.insync.replicas": "2"}
    assert m.apply(c.AlterConfigs("broker", "", {"min.insync.replicas": "2"})).ok
    assert m.apply(c.AlterConfigs("broker", "1", {"log.retention.ms": "5"})).ok
    assert m.broker_configs == {"": {"min.insync.replicas": "2"}, "1": {"log.retention.ms": "5"}}
    assert m.apply(c.AlterConfigs("broker", "1", {}, ("log.retention.ms",))).ok
    assert "1" not in m.broker_configs
    refused(m, c.AlterConfigs("topic", "nope", {"a": "b"}), "UNKNOWN_TOPIC_OR_PARTITION")
    refused(m, c.AlterConfigs("topic", "t", {"min.insync.replicas": "x"}), "INVALID_CONFIG")
    refused(m, c.AlterConfigs("broker", "9", {"a": "b"}), "INVALID_REQUEST")
    refused(m, c.AlterConfigs("broker", "", {"min.insync.replicas": "-1"}), "INVALID_CONFIG")
    refused(m, c.AlterConfigs("broker", "", {"unclean.leader.election.enable": "maybe"}), "INVALID_CONFIG")
    refused(m, c.AlterConfigs("client_metrics", "m", {"a": "b"}), "INVALID_REQUEST")
    # a group's configs (share groups'), whether or not the group exists, as Kafka's controller keeps GROUP configs
    assert m.apply(c.AlterConfigs("group", "g", {"share.delivery.count.limit": "3"})).ok
    assert m.snapshot()["group_configs"] == {"g": {"share.delivery.count.limit": "3"}}
    assert m.apply(c.AlterConfigs("group", "g", {}, ("share.delivery.count.limit",))).ok
    assert m.group_configs == {}
    refused(m, c.AlterConfigs("group", "", {"share.delivery.count.limit": "3"}), "INVALID_GROUP_ID")


def test_a_raft_snapshot_of_an_older_version_gets_the_fields_added_since():
    import pickle

    m, _ = cluster(2)
    old = pickle.loads(pickle.dumps(m))
    del old.__dict__["group_configs"]  # as pickled before group configs were cluster metadata
    restored = pickle.loads(pickle.dumps(old))
    assert restored.group_configs == {} and restored.snapshot()["group_configs"] == {}
    assert restored.apply(c.AlterConfigs("group", "g", {"share.delivery.count.limit": "3"})).ok
    assert sorted(restored.brokers) == sorted(m.brokers)


def test_scram_users():
    m = ClusterMetadata()
    cred = dict(iterations=4096, salt="c2FsdA==", stored_key="a2V5", server_key="c2Vy")
    assert m.apply(c.UpsertScramCredential("alice", "SCRAM-SHA-256", **cred)).ok
    assert m.snapshot()["users"] == {"alice": ["SCRAM-SHA-256"]}
    refused(m, c.UpsertScramCredential("alice", "SCRAM-MD5", **cred), "UNSUPPORTED_SASL_MECHANISM")
    refused(m, c.UpsertScramCredential("", "SCRAM-SHA-256", **cred), "INVALID_REQUEST")
    refused(m, c.UpsertScramCredential("bob", "SCRAM-SHA-256", **{**cred, "iterations": 10}), "INVALID_REQUEST")
    refused(m, c.DeleteScramCredential("alice", "SCRAM-SHA-512"), "RESOURCE_NOT_FOUND")
    assert m.apply(c.DeleteScramCredential("alice", "SCRAM-SHA-256")).ok
    assert m.users == {}


def test_acls():
    m = ClusterMetadata()
    read = c.CreateAcl("TOPIC", "t", "LITERAL", "User:alice", "*", "READ", "ALLOW")
    write = c.CreateAcl("TOPIC", "t", "LITERAL", "User:bob", "*", "WRITE", "ALLOW")
    assert m.apply(read).ok and m.apply(write).ok and m.apply(read).ok
    assert len(m.acls) == 2
    refused(m, c.CreateAcl("TOPIC", "", "LITERAL", "User:x", "*", "READ", "ALLOW"), "INVALID_REQUEST")
    result = m.apply(c.DeleteAcls(principal="User:alice"))
    assert [a["principal"] for a in result.value["deleted"]] == ["User:alice"]
    assert [a["principal"] for a in m.acls] == ["User:bob"]


def test_client_quotas():
    m = ClusterMetadata()
    entity = (("user", "alice"), ("client-id", None))
    assert m.apply(c.AlterClientQuota(entity, "producer_byte_rate", 1024.0)).ok
    assert m.quotas == {(("client-id", None), ("user", "alice")): {"producer_byte_rate": 1024.0}}
    refused(m, c.AlterClientQuota((("group", "g"),), "producer_byte_rate", 1.0), "INVALID_REQUEST")
    refused(m, c.AlterClientQuota((("user", "a"), ("user", "b")), "producer_byte_rate", 1.0), "INVALID_REQUEST")
    refused(m, c.AlterClientQuota(entity, "producer_byte_rate", 0.0), "INVALID_REQUEST")
    assert m.apply(c.AlterClientQuota(entity, "producer_byte_rate", None)).ok
    assert m.quotas == {}


# -- determinism and the command codec -----------------------------------------------------------------------
def test_two_replicas_applying_the_same_commands_hold_the_same_metadata():
    log = [
        c.RegisterBroker(1, "a", "h", 1, 100), c.RegisterBroker(2, "b", "h", 2, 100),
        c.BrokerHeartbeat(1, 1, 200), c.BrokerHeartbeat(2, 2, 200),
        c.CreateTopic("t", "id-t", 4, 2, 17, 5), c.CreateTopic("t", "id-u", 1, 1, 0, 0),
        c.FenceStaleBrokers(200 + SESSION + 1, SESSION),
    ]
    a, b = ClusterMetadata(), ClusterMetadata()
    answers_a = [a.apply(copy.deepcopy(cmd)) for cmd in log]
    answers_b = [b.apply(copy.deepcopy(cmd)) for cmd in log]
    assert answers_a == answers_b and a.snapshot() == b.snapshot()
    assert pickle.loads(pickle.dumps(a)).snapshot() == a.snapshot()


def test_commands_round_trip_through_their_json_form_and_bad_ones_are_named():
    for cmd in (c.CreateTopic("t", "i", 1, 1, 0, 0, {"a": "b"}), c.AlterPartition(1, 2, "i", 0, 0, 0, (1, 2)),
                c.AlterClientQuota((("user", "a"),), "k", 1.0), c.AlterConfigs("topic", "t", {}, ("x",))):
        assert c.from_dict(c.to_dict(cmd)) == cmd
    with pytest.raises(ValueError, match="unknown command 'Nope'"):
        c.from_dict({"command": "Nope"})
    with pytest.raises(ValueError, match="unknown field"):
        c.from_dict({"command": "DeleteTopic", "name": "t", "colour": "red"})
    with pytest.raises(ValueError, match="DeleteTopic"):
        c.from_dict({"command": "DeleteTopic"})


@pytest.mark.parametrize("data, message", [
    ({"command": "CreateTopic", "name": "t", "topic_id": "i", "partitions": "3", "replication_factor": 1,
      "start_index": 0, "shift": 0}, "partitions must be an integer"),
    ({"command": "CreateTopic", "name": 5, "topic_id": "i", "partitions": 3, "replication_factor": 1,
      "start_index": 0, "shift": 0}, "name must be a string"),
    ({"command": "CreateTopic", "name": "t", "topic_id": "i", "partitions": 1, "replication_factor": 1,
      "start_index": 0, "shift": 0, "configs": {"retention.ms": 5}}, "configs must be an object of strings"),
    ({"command": "BrokerHeartbeat", "broker_id": True, "broker_epoch": 1, "now_ms": 1}, "broker_id must be"),
    ({"command": "BrokerHeartbeat", "broker_id": 1, "broker_epoch": 1, "now_ms": 1, "want_fence": "no"},
     "want_fence must be true or false"),
    ({"command": "AlterPartition", "broker_id": 1, "broker_epoch": 1, "topic_id": "i", "partition": 0,
      "leader_epoch": 0, "partition_epoch": 0, "new_isr": ["1"]}, "new_isr must be a list of integers"),
    ({"command": "AlterClientQuota", "entity": [["user"]], "key": "k", "value": 1}, "entity must be a list of"),
    ({"command": "AlterClientQuota", "entity": [["user", "a"]], "key": "k", "value": "1"}, "value must be a number"),
])
def test_commands_of_the_wrong_shape_never_reach_the_log(data, message):
    with pytest.raises(ValueError, match=message):
        c.from_dict(data)


# -- sessions, partitions added, producer ids (issue #46's wiring) ---------------------------------------------
def test_a_closed_session_fences_at_once_moves_leaderships_and_lets_a_new_incarnation_register():
    m, epochs = cluster(3)
    topic_id = create(m, partitions=1)
    assert partition(m, topic_id, 0).leader == 1
    refused(m, c.CloseBrokerSession(1, epochs[1] + 100), "STALE_BROKER_EPOCH")
    refused(m, c.CloseBrokerSession(9, 1), "BROKER_ID_NOT_REGISTERED")
    assert m.apply(c.CloseBrokerSession(1, epochs[1])).value == {"fenced": True}
    p = partition(m, topic_id, 0)
    assert m.brokers[1].fenced and p.leader == 2 and p.leader_epoch == 1 and 1 not in p.isr
    # the session is over: a new process with the same node id registers now, not a session timeout later
    assert register(m, 1, now_ms=1001, incarnation="restarted") > epochs[1]


def test_a_closed_session_of_a_broker_still_alive_ends_with_its_next_heartbeat():
    m, epochs = cluster(2)
    assert m.apply(c.CloseBrokerSession(2, epochs[2])).ok
    assert m.apply(c.BrokerHeartbeat(2, epochs[2], 1200)).value == {"fenced": False}
    assert m.unfenced() == [1, 2]


def test_create_partitions_places_the_new_ones_with_the_topics_replication_factor():
    m, _ = cluster(3)
    topic_id = create(m, partitions=2, rf=2)
    result = m.apply(c.CreatePartitions("t", 5, start_index=0, shift=0))
    assert result.ok and len(result.value["assignment"]) == 3
    parts = m.topics[topic_id].partitions
    assert len(parts) == 5
    assert all(len(p.replicas) == 2 and p.isr == p.replicas and p.leader == p.replicas[0] for p in parts[2:])
    refused(m, c.CreatePartitions("t", 5, 0, 0), "INVALID_PARTITIONS")
    refused(m, c.CreatePartitions("nope", 9, 0, 0), "UNKNOWN_TOPIC_OR_PARTITION")
    wide = create(m, "wide", partitions=1, rf=3)
    m.apply(c.BrokerHeartbeat(3, m.brokers[3].epoch, 2000, want_fence=True))
    refused(m, c.CreatePartitions("wide", 2, 0, 0), "INVALID_REPLICATION_FACTOR")
    assert len(m.topics[wide].partitions) == 1


def test_producer_id_blocks_never_overlap():
    m, epochs = cluster(2)
    a = m.apply(c.AllocateProducerIds(1, epochs[1], 1000)).value
    b = m.apply(c.AllocateProducerIds(2, epochs[2], 1000)).value
    assert (a["start"], b["start"]) == (0, 1000)
    refused(m, c.AllocateProducerIds(1, epochs[1] + 7, 10), "STALE_BROKER_EPOCH")
    refused(m, c.AllocateProducerIds(1, epochs[1], 0), "INVALID_REQUEST")
    assert m.apply(c.AllocateProducerIds(1, epochs[1], 5)).value["start"] == 2000
