"""Partition reassignment in the controller's state machine (KIP-455): start, completion on AlterPartition, cancel,
a new target over one in progress, and every refusal with nothing changed."""

import pickle

from freshet.controller import commands as c
from freshet.controller.state import ClusterMetadata

from .test_state import cluster, create, partition, refused


def reassign(m: ClusterMetadata, replicas, topic="t", p=0, **kw):
    result = m.apply(c.AlterPartitionReassignment(topic, p, tuple(replicas), **kw))
    assert result.ok, result
    return result.value


def alter_isr(m: ClusterMetadata, epochs, topic_id: str, p: int, isr):
    part = partition(m, topic_id, p)
    result = m.apply(c.AlterPartition(part.leader, epochs[part.leader], topic_id, p, part.leader_epoch,
                                      part.partition_epoch, tuple(isr)))
    assert result.ok, result
    return result.value


def test_a_move_adds_replicas_then_completes_when_the_target_is_in_the_isr():
    m, epochs = cluster(3)
    tid = create(m, partitions=1, rf=2)
    part = partition(m, tid, 0)
    assert part.replicas == [1, 2] and part.leader == 1
    value = reassign(m, [2, 3])
    assert not value["completed"]
    assert (part.replicas, part.adding_replicas, part.removing_replicas) == ([2, 3, 1], (3,), (1,))
    assert part.isr == [2, 1] and part.leader == 1 and part.leader_epoch == 0  # the leader stays during the move
    assert m.reassignments() == [{"topic": "t", "partition": 0, "replicas": [2, 3, 1], "adding_replicas": [3],
                                  "removing_replicas": [1]}]
    snapshot = m.snapshot()["topics"][0]["partitions"][0]
    assert snapshot["adding_replicas"] == (3,) and snapshot["removing_replicas"] == (1,)
    # the new replica caught up: the leader's AlterPartition brings it in and completes the move
    value = alter_isr(m, epochs, tid, 0, [1, 2, 3])
    assert part.replicas == [2, 3] and part.isr == [2, 3] and value["isr"] == [2, 3]
    assert part.adding_replicas == () and part.removing_replicas == ()
    assert part.leader == 2 and part.leader_epoch == 1  # the removed leader handed over
    assert m.reassignments() == []


def test_a_move_keeps_a_leader_that_stays_and_a_replication_factor_change():
    m, epochs = cluster(3)
    tid = create(m, partitions=1, rf=1)
    part = partition(m, tid, 0)
    leader = part.leader
    others = [b for b in (1, 2, 3) if b != leader]
    reassign(m, [leader, *others])
    assert part.adding_replicas == tuple(others) and part.removing_replicas == ()
    alter_isr(m, epochs, tid, 0, [leader, others[0]])
    assert part.adding_replicas == tuple(others)  # not done while one target replica is still out
    alter_isr(m, epochs, tid, 0, [leader, *others])
    assert part.replicas == [leader, *others] and part.isr == [leader, *others]
    assert part.leader == leader and part.leader_epoch == 0 and m.reassignments() == []
    # shrinking back to one replica needs no catching up: done at once, the leader kept
    assert reassign(m, [leader])["completed"]
    assert part.replicas == [leader] and part.isr == [leader] and part.leader_epoch == 0


def test_cancel_goes_back_to_the_original_replicas():
    m, epochs = cluster(3)
    tid = create(m, partitions=1, rf=2)
    part = partition(m, tid, 0)
    reassign(m, [2, 3])
    epoch = part.partition_epoch
    value = m.apply(c.AlterPartitionReassignment("t", 0, cancel=True)).value
    # the original replicas in the order they had during the move (as Kafka's revert), the leader kept
    assert value["completed"] and part.replicas == [2, 1] and part.isr == [2, 1] and part.leader == 1
    assert part.adding_replicas == () and part.partition_epoch > epoch
    refused(m, c.AlterPartitionReassignment("t", 0, cancel=True), "NO_REASSIGNMENT_IN_PROGRESS")


def test_a_new_target_over_one_in_progress_starts_from_the_original_replicas():
    m, epochs = cluster(4)
    tid = create(m, partitions=1, rf=2)
    part = partition(m, tid, 0)
    original = list(part.replicas)
    spare = [b for b in (1, 2, 3, 4) if b not in original]
    reassign(m, [original[0], spare[0]])
    reassign(m, [original[0], spare[1]])
    assert part.replicas == [original[0], spare[1], original[1]]
    assert part.adding_replicas == (spare[1],) and part.removing_replicas == (original[1],)
    m.apply(c.AlterPartitionReassignment("t", 0, cancel=True))
    assert sorted(part.replicas) == sorted(original) and part.adding_replicas == part.removing_replicas == ()


def test_a_leader_being_removed_hands_over_to_the_new_replica():
    m, epochs = cluster(3)
    tid = create(m, partitions=1, rf=1)
    part = partition(m, tid, 0)
    first = part.leader
    other = next(b for b in (1, 2, 3) if b != first)
    reassign(m, [other])
    alter_isr(m, epochs, tid, 0, [first, other])  # completes: the leader moves to the new replica
    assert part.replicas == [other] and part.leader == other and part.leader_epoch == 1


def test_refusals_change_nothing():
    m, epochs = cluster(3)
    create(m, partitions=2, rf=2)
    refused(m, c.AlterPartitionReassignment("nope", 0, (1, 2)), "UNKNOWN_TOPIC_OR_PARTITION")
    refused(m, c.AlterPartitionReassignment("t", 5, (1, 2)), "UNKNOWN_TOPIC_OR_PARTITION")
    refused(m, c.AlterPartitionReassignment("t", 0, ()), "INVALID_REPLICA_ASSIGNMENT")
    refused(m, c.AlterPartitionReassignment("t", 0, (1, 1)), "INVALID_REPLICA_ASSIGNMENT")
    refused(m, c.AlterPartitionReassignment("t", 0, (1, 9)), "INVALID_REPLICA_ASSIGNMENT")
    refused(m, c.AlterPartitionReassignment("t", 0, (1, 2, 3), allow_replication_factor_change=False),
            "INVALID_REPLICATION_FACTOR")
    refused(m, c.AlterPartitionReassignment("t", 0, cancel=True), "NO_REASSIGNMENT_IN_PROGRESS")


def test_a_registered_broker_that_is_fenced_may_be_named_a_new_replica_and_the_move_waits_for_it():
    # as Kafka's validateManualPartitionAssignment: a broker must be registered, not alive (it may be restarting);
    # it cannot join the ISR while fenced, so the move completes only once it is back and caught up
    m, epochs = cluster(3)
    tid = create(m, partitions=1, rf=2)
    part = partition(m, tid, 0)
    spare = next(b for b in (1, 2, 3) if b not in part.replicas)
    assert m.apply(c.BrokerHeartbeat(spare, epochs[spare], 2000, want_fence=True)).ok
    value = reassign(m, [part.replicas[0], spare])
    assert not value["completed"] and part.adding_replicas == (spare,)
    refused(m, c.AlterPartition(part.leader, epochs[part.leader], tid, 0, part.leader_epoch, part.partition_epoch,
                                tuple([*part.isr, spare])), "INELIGIBLE_REPLICA")
    assert m.apply(c.BrokerHeartbeat(spare, epochs[spare], 3000)).ok
    alter_isr(m, epochs, tid, 0, [*part.isr, spare])
    assert spare in part.replicas and m.reassignments() == []


def test_reassignment_commands_round_trip_and_replicate_deterministically():
    command = c.AlterPartitionReassignment("t", 0, (2, 3))
    assert c.from_dict(c.to_dict(command)) == command
    assert c.from_dict({"command": "AlterPartitionReassignment", "topic": "t", "partition": 0,
                        "replicas": [2, 3]}) == command
    m1, _ = cluster(3)
    create(m1, partitions=1, rf=2)
    m2 = pickle.loads(pickle.dumps(m1))
    for m in (m1, m2):
        reassign(m, [2, 3])
    assert pickle.dumps(m1.snapshot()) == pickle.dumps(m2.snapshot())


def test_replication_throttle_configs_are_checked():
    m, epochs = cluster(3)
    create(m, partitions=2, rf=2)
    rate = "leader.replication.throttled.rate"
    assert m.apply(c.AlterConfigs("broker", "1", set={rate: "1048576"})).ok
    assert m.apply(c.AlterConfigs("broker", "", set={"follower.replication.throttled.rate": "0"})).ok
    refused(m, c.AlterConfigs("broker", "2", set={rate: "fast"}), "INVALID_CONFIG")
    refused(m, c.AlterConfigs("broker", "2", set={rate: "-5"}), "INVALID_CONFIG")
    replicas = "leader.replication.throttled.replicas"
    for good in ("*", "0:1,1:2", "0:1, 1:3", ""):
        assert m.apply(c.AlterConfigs("topic", "t", set={replicas: good})).ok, good
    for bad in ("all", "0:", "1:2,*", "a:b"):
        refused(m, c.AlterConfigs("topic", "t", set={"follower.replication.throttled.replicas": bad}),
                "INVALID_CONFIG")
    assert m.broker_configs["1"][rate] == "1048576" and m.topic_configs["t"][replicas] == ""


def test_partitions_added_during_a_move_take_the_replication_factor_of_its_target():
    m, epochs = cluster(3)
    create(m, partitions=1, rf=1)
    leader = partition(m, "id-t", 0).leader
    reassign(m, [b for b in (1, 2, 3) if b != leader][:1])  # replicas [new, old] while it moves
    assert m.apply(c.CreatePartitions("t", 2, start_index=0, shift=0)).ok
    assert len(partition(m, "id-t", 1).replicas) == 1


def test_a_move_waits_for_a_fenced_new_replica_and_can_still_be_cancelled():
    m, epochs = cluster(3)
    tid = create(m, partitions=1, rf=2)
    part = partition(m, tid, 0)
    spare = next(b for b in (1, 2, 3) if b not in part.replicas)
    original = list(part.replicas)
    reassign(m, [original[0], spare])
    assert m.apply(c.BrokerHeartbeat(spare, epochs[spare], 2000, want_fence=True)).ok  # the new replica goes away
    refused(m, c.AlterPartition(part.leader, epochs[part.leader], tid, 0, part.leader_epoch, part.partition_epoch,
                                tuple([*part.isr, spare])), "INELIGIBLE_REPLICA")
    assert part.adding_replicas == (spare,)  # still moving: nothing completes without the new replica
    assert m.apply(c.AlterPartitionReassignment("t", 0, cancel=True)).ok
    assert sorted(part.replicas) == sorted(original) and part.adding_replicas == ()


def test_a_move_completes_once_its_new_replicas_are_in_the_isr_though_a_kept_replica_is_down():
    # as Kafka's maybeCompleteReassignment: the replicas being added must be in the ISR, not every replica of the
    # target; a replica that stays but is down (out of the ISR) does not hold the move up forever
    m, epochs = cluster(4)
    tid = create(m, partitions=1, rf=3)
    part = partition(m, tid, 0)
    a, b, down = part.replicas
    spare = next(x for x in (1, 2, 3, 4) if x not in part.replicas)
    assert m.apply(c.BrokerHeartbeat(down, epochs[down], 2000, want_fence=True)).ok
    assert down not in part.isr
    # dropping a replica adds nothing: done at once
    value = reassign(m, [a, down])
    assert value["completed"] and part.replicas == [a, down] and part.isr == [a] and m.reassignments() == []
    # a new replica: done when it joins the ISR, the replica still down kept
    reassign(m, [a, down, spare])
    assert part.adding_replicas == (spare,)
    alter_isr(m, epochs, tid, 0, [a, spare])
    assert part.replicas == [a, down, spare] and part.isr == [a, spare] and m.reassignments() == []
    assert b not in part.replicas


def test_a_move_to_replicas_all_out_of_the_isr_waits_though_it_adds_none():
    # Kafka's other rule: the ISR left once the removed replicas go must not be empty (nobody could lead)
    m, epochs = cluster(3)
    tid = create(m, partitions=1, rf=3)
    part = partition(m, tid, 0)
    a, b, down = part.replicas
    assert m.apply(c.BrokerHeartbeat(down, epochs[down], 2000, want_fence=True)).ok
    value = reassign(m, [down])
    assert not value["completed"] and part.adding_replicas == () and part.removing_replicas == (a, b)
    assert part.leader == a and m.reassignments() != []
    assert m.apply(c.BrokerHeartbeat(down, epochs[down], 3000)).ok  # back, caught up, let in: done
    alter_isr(m, epochs, tid, 0, [a, b, down])
    assert part.replicas == [down] and part.isr == [down] and part.leader == down and m.reassignments() == []
