"""Manual replica assignments (CreateTopics / CreatePartitions with ``assignments``): the checks of
``controller.placement`` and the state machine taking them, Kafka's INVALID_REPLICA_ASSIGNMENT and nothing
changed on a refusal."""

import re

import pytest

from freshet.controller import commands as c
from freshet.controller.placement import AssignmentError, check_assignment, ordered_assignment
from freshet.controller.state import ClusterMetadata

from .test_state import cluster, create, refused


# -- the request's (partition index, brokers) pairs ---------------------------------------------------------
def test_pairs_in_any_order_become_one_replica_list_per_partition():
    assert ordered_assignment([(1, [2, 3]), (0, [1, 2]), (2, [3, 1])]) == [[1, 2], [2, 3], [3, 1]]


@pytest.mark.parametrize("pairs, message", [
    ([(0, [1]), (0, [2])], "partition 0 is assigned more than once"),
    ([(1, [1]), (2, [2])], "partition 0 is not assigned: the partition ids of 2 assignments must be 0..1"),
    ([(0, [1]), (2, [2])], "partition 1 is not assigned"),
    ([(-1, [1]), (0, [2])], "partition 1 is not assigned"),
])
def test_partition_indexes_must_be_0_to_n_minus_1_once_each(pairs, message):
    with pytest.raises(AssignmentError, match=message):
        ordered_assignment(pairs)


# -- the replica lists --------------------------------------------------------------------------------------
@pytest.mark.parametrize("assignment, factor, message", [
    ([[1, 2], []], None, "partition 1 is assigned an empty replica list"),
    ([[1, 2, 1]], None, "partition 0 names broker 1 more than once"),
    ([list(range(1, 100_000)) + [7]], None, "partition 0 names broker 7 more than once"),  # linear, not quadratic
    ([[1, 2], [2, 9]], None, "partition 1 is assigned to broker 9, which is not registered"),
    ([[1, 2], [4]], None, "all brokers of partition 1's replica assignment \\(\\[4\\]\\) are fenced or shutting down"),
    ([[1, 2], [2, 3, 1]], None, "partition 1 has 3 replica\\(s\\), the other partitions 2"),
    ([[1, 2, 3]], 2, "partition 0 has 3 replica\\(s\\), the other partitions 2"),
])
def test_bad_replica_lists_are_named(assignment, factor, message):
    with pytest.raises(AssignmentError, match=message):
        check_assignment(assignment, registered={1, 2, 3, 4}, live=[1, 2, 3], replication_factor=factor)


def test_partitions_are_numbered_from_the_first_one_added():
    with pytest.raises(AssignmentError, match="partition 5 names broker 2 more than once"):
        check_assignment([[1, 2], [2, 2]], {1, 2}, {1, 2}, 2, first_partition=4)
    check_assignment([[1, 2], [2, 1]], {1, 2}, {1, 2}, 2, first_partition=4)  # a good one passes


# -- the state machine ----------------------------------------------------------------------------------------
def assigned(name: str, *replicas, partitions: int = -1, rf: int = -1) -> c.CreateTopic:
    return c.CreateTopic(name, f"id-{name}", partitions, rf, start_index=0, shift=0,
                         assignment=tuple(tuple(r) for r in replicas))


def test_create_topic_takes_the_given_replicas_the_first_one_leading():
    m, _ = cluster(3)
    result = m.apply(assigned("t", (1, 2), (2, 3), (3, 1), (3, 2)))
    assert result.ok, result
    assert result.value["assignment"] == [[1, 2], [2, 3], [3, 1], [3, 2]]
    parts = m.topics["id-t"].partitions
    assert [(p.replicas, p.isr, p.leader) for p in parts] == [
        ([1, 2], [1, 2], 1), ([2, 3], [2, 3], 2), ([3, 1], [3, 1], 3), ([3, 2], [3, 2], 3)]


def test_a_fenced_replica_beside_a_live_one_is_taken_outside_the_isr():
    """As KRaft: a manual assignment may name a fenced broker when the partition has a live one; the live replicas
    are the ISR, the first of them leads, the fenced one joins once it has caught up."""
    check_assignment([[1, 4]], registered={1, 2, 3, 4}, live=[1, 2, 3])
    m, epochs = cluster(3)
    fence(m, 1, epochs[1])
    result = m.apply(assigned("t", (1, 2), (3, 1)))
    assert result.ok, result
    assert [(p.replicas, p.isr, p.leader) for p in m.topic_by_name("t").partitions] == [
        ([1, 2], [2], 2), ([3, 1], [3], 3)]


def test_create_topic_with_its_own_counts_beside_the_assignment_is_taken():
    m, _ = cluster(3)
    assert m.apply(assigned("t", (1, 2), (2, 3), partitions=2, rf=2)).ok


def fence(m: ClusterMetadata, broker: int, epoch: int) -> None:
    assert m.apply(c.BrokerHeartbeat(broker, epoch, 2000, want_fence=True)).ok


@pytest.mark.parametrize("replicas, message", [
    (((1, 2), (2, 9)), "broker 9, which is not registered"),
    (((3,), (1,)), "all brokers of partition 0's replica assignment \\(\\[3\\]\\) are fenced"),  # fenced below
    (((1, 2), (2, 2)), "names broker 2 more than once"),
    (((1, 2), (2,)), "partition 1 has 1 replica\\(s\\), the other partitions 2"),
    (((1, 2), ()), "partition 1 is assigned an empty replica list"),
])
def test_create_topic_refuses_a_bad_assignment_and_changes_nothing(replicas, message):
    m, epochs = cluster(3)
    fence(m, 3, epochs[3])
    result = refused(m, assigned("t", *replicas), "INVALID_REPLICA_ASSIGNMENT")
    assert re.search(message, result.message), result.message
    assert m.topic_by_name("t") is None


def test_create_topic_refuses_other_counts_beside_an_assignment():
    m, _ = cluster(3)
    refused(m, assigned("t", (1, 2), partitions=3), "INVALID_REQUEST")
    refused(m, assigned("t", (1, 2), rf=3), "INVALID_REQUEST")


def test_create_partitions_takes_the_given_replicas_of_the_new_partitions():
    m, _ = cluster(3)
    topic_id = create(m, "t", partitions=2, rf=2)
    result = m.apply(c.CreatePartitions("t", 4, start_index=0, shift=0, assignment=((3, 1), (2, 3))))
    assert result.ok, result
    parts = m.topics[topic_id].partitions
    assert [(p.replicas, p.isr, p.leader) for p in parts[2:]] == [([3, 1], [3, 1], 3), ([2, 3], [2, 3], 2)]


@pytest.mark.parametrize("count, replicas, message", [
    (4, ((3, 1),), "2 partition\\(s\\) are added to 't', but 1 replica assignment"),
    (3, ((3, 1), (1, 2)), "1 partition\\(s\\) are added to 't', but 2 replica assignment"),
    (3, ((1, 2, 3),), "partition 2 has 3 replica\\(s\\), the other partitions 2"),  # the topic's factor is 2
    (3, ((7, 1),), "partition 2 is assigned to broker 7, which is not registered"),
    (3, ((1, 1),), "partition 2 names broker 1 more than once"),
])
def test_create_partitions_refuses_a_bad_assignment_and_changes_nothing(count, replicas, message):
    m, _ = cluster(3)
    create(m, "t", partitions=2, rf=2)
    result = refused(m, c.CreatePartitions("t", count, start_index=0, shift=0, assignment=replicas),
                     "INVALID_REPLICA_ASSIGNMENT")
    assert re.search(message, result.message), result.message


def test_the_assignment_round_trips_through_the_json_form_and_a_bad_shape_is_named():
    command = assigned("t", (1, 2), (2, 3))
    assert c.from_dict(c.to_dict(command) | {"assignment": [[1, 2], [2, 3]]}) == command
    with pytest.raises(ValueError, match="assignment must be a list of lists of integers"):
        c.from_dict(c.to_dict(command) | {"assignment": [[1, "2"]]})
    partitions = c.CreatePartitions("t", 3, 0, 0, assignment=((1, 2),))
    assert c.from_dict(c.to_dict(partitions) | {"assignment": [[1, 2]]}) == partitions
