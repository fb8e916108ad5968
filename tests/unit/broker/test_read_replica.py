"""KIP-392's replica selection (``replication.read_replica``), as Kafka's RackAwareReplicaSelector chooses."""

from types import SimpleNamespace

from freshet.broker.replication.leader import FollowerProgress
from freshet.broker.replication.metadata import BrokerEndpoint
from freshet.broker.replication.read_replica import (LEADER_SELECTOR, RACK_AWARE_SELECTOR, preferred_read_replica,
                                                     reads_as_follower)

RACKS = {1: "a", 2: "b", 3: "b", 4: "c"}


def setup(selector=RACK_AWARE_SELECTOR, ends=None, isr=(1, 2, 3, 4), fenced=()):
    brokers = {n: BrokerEndpoint(n, "127.0.0.1", 9000 + n, rack, n in fenced) for n, rack in RACKS.items()}
    replicas = SimpleNamespace(node_id=1, brokers=brokers, followed={("t", 0): object()},
                               broker=SimpleNamespace(config=SimpleNamespace(replica_selector_class=selector)))
    ends = ends or {2: 100, 3: 100, 4: 100}
    leader = SimpleNamespace(isr=tuple(isr), followers={n: FollowerProgress(log_end_offset=e) for n, e in ends.items()})
    return replicas, leader


def test_the_follower_in_the_clients_rack():
    assert preferred_read_replica(*setup(), "c", 50) == 4


def test_the_most_caught_up_of_the_followers_in_the_rack_then_the_lowest_id():
    assert preferred_read_replica(*setup(ends={2: 90, 3: 100, 4: 100}), "b", 50) == 3
    assert preferred_read_replica(*setup(ends={2: 100, 3: 100, 4: 100}), "b", 50) == 2


def test_the_leader_when_it_is_in_the_clients_rack_or_no_replica_is_or_no_rack_is_named():
    assert preferred_read_replica(*setup(), "a", 50) == -1
    assert preferred_read_replica(*setup(), "z", 50) == -1
    assert preferred_read_replica(*setup(), "", 50) == -1


def test_never_a_follower_out_of_the_isr_behind_the_offset_or_fenced():
    assert preferred_read_replica(*setup(isr=(1, 2, 3)), "c", 50) == -1
    assert preferred_read_replica(*setup(ends={2: 100, 3: 100, 4: 40}), "c", 50) == -1
    assert preferred_read_replica(*setup(fenced=(4,)), "c", 50) == -1
    assert preferred_read_replica(*setup(ends={2: 100, 3: 40, 4: 100}), "b", 50) == 2


def test_the_leader_selector_kafkas_default_keeps_consumers_on_the_leader():
    assert preferred_read_replica(*setup(selector=LEADER_SELECTOR), "c", 50) == -1
    assert preferred_read_replica(*setup(selector=None), "c", 50) == -1


def test_a_follower_serves_consumers_from_fetch_v11():
    replicas, _ = setup()
    assert reads_as_follower(replicas, "t", 0, 11) and reads_as_follower(replicas, "t", 0, 18)
    assert not reads_as_follower(replicas, "t", 0, 10)
    assert not reads_as_follower(replicas, "t", 1, 12)  # not a partition it follows
    plain, _ = setup(selector=None)  # no selector here: no consumer was sent to it, the leader is named instead
    assert not reads_as_follower(plain, "t", 0, 16)
