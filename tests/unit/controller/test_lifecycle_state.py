"""The controller's state machine for brokers joining and leaving: controlled shutdown (leaderships handed over,
the ISRs left, nothing new given to a broker that is stopping)."""

from freshet.controller import commands as c

from .test_state import cluster, create, partition, refused, register


def leaders(m, topic_id):
    return [p.leader for p in m.topics[topic_id].partitions]


def test_controlled_shutdown_moves_every_leadership_to_an_isr_member_and_leaves_the_isrs():
    m, epochs = cluster(3)
    t = create(m, partitions=3)  # leaders 1, 2, 3
    assert leaders(m, t) == [1, 2, 3]
    before = [(p.leader_epoch, p.partition_epoch) for p in m.topics[t].partitions]
    result = m.apply(c.ControlledShutdown(1, epochs[1]))
    assert result.ok and result.value == {"kept": []}
    assert 1 not in leaders(m, t)
    for i, p in enumerate(m.topics[t].partitions):
        assert 1 not in p.isr and p.leader in p.isr
        assert p.partition_epoch == before[i][1] + 1
        # a leader epoch bumps only where the leadership moved
        assert p.leader_epoch == before[i][0] + (1 if i == 0 else 0)
    assert m.brokers[1].shutting_down and not m.brokers[1].fenced and m.unfenced() == [2, 3]


def test_a_broker_shutting_down_is_never_chosen_as_leader_nor_let_into_an_isr():
    m, epochs = cluster(3)
    t = create(m, partitions=1)  # replicas [1, 2, 3]
    assert m.apply(c.ControlledShutdown(1, epochs[1])).ok
    part = partition(m, t, 0)
    assert part.leader == 2
    # the leader's AlterPartition cannot bring it back into the ISR
    refused(m, c.AlterPartition(2, epochs[2], t, 0, part.leader_epoch, part.partition_epoch, (1, 2, 3)),
            "INELIGIBLE_REPLICA")
    # nor a preferred election make it lead, nor a fencing of the others hand it a leadership
    refused(m, c.ElectLeaders("t", 0), "PREFERRED_LEADER_NOT_AVAILABLE")
    assert m.apply(c.BrokerHeartbeat(3, epochs[3], 2000, want_fence=True)).ok
    assert m.apply(c.BrokerHeartbeat(2, epochs[2], 2000, want_fence=True)).ok
    part = partition(m, t, 0)
    assert (part.leader, part.isr) == (-1, [2])  # its last ISR member fenced: offline, not led by the stopping one
    # no new replica on it either
    refused(m, c.CreateTopic("u", "id-u", 1, 1, 0, 0), "INVALID_REPLICATION_FACTOR")


def test_a_leadership_no_other_isr_member_can_take_is_kept_and_named():
    m, epochs = cluster(2)
    t = create(m, partitions=1, rf=2)
    part = partition(m, t, 0)
    leader, follower = part.replicas
    assert m.apply(c.BrokerHeartbeat(follower, epochs[follower], 2000, want_fence=True)).ok
    assert partition(m, t, 0).isr == [leader]
    result = m.apply(c.ControlledShutdown(leader, epochs[leader]))
    assert result.value == {"kept": ["t-0"]}
    part = partition(m, t, 0)
    assert (part.leader, part.isr, part.leader_epoch) == (leader, [leader], 0)  # not offline, not unclean


def test_the_last_member_of_an_isr_stays_in_it():
    m, epochs = cluster(3)
    t = create(m, partitions=1, rf=3)
    for b in (2, 3):  # fenced: out of the ISR, leaving broker 1 its last member
        assert m.apply(c.BrokerHeartbeat(b, epochs[b], 2000, want_fence=True)).ok
    assert m.apply(c.ControlledShutdown(1, epochs[1])).ok
    assert partition(m, t, 0).isr == [1]


def test_controlled_shutdown_of_an_unknown_broker_or_an_old_epoch_is_refused():
    m, epochs = cluster(3)
    create(m)
    refused(m, c.ControlledShutdown(7, 1), "BROKER_ID_NOT_REGISTERED")
    refused(m, c.ControlledShutdown(1, epochs[1] + 100), "STALE_BROKER_EPOCH")


def test_a_new_incarnation_after_a_controlled_shutdown_is_a_whole_broker_again():
    m, epochs = cluster(3)
    t = create(m, partitions=1)
    assert m.apply(c.ControlledShutdown(1, epochs[1])).ok
    assert m.apply(c.CloseBrokerSession(1, epochs[1])).ok  # the process exits
    epoch = register(m, 1, now_ms=3000, incarnation="second")
    assert m.apply(c.BrokerHeartbeat(1, epoch, 3000)).ok
    assert not m.brokers[1].shutting_down and m.unfenced() == [1, 2, 3]
    part = partition(m, t, 0)
    assert m.apply(c.AlterPartition(part.leader, epochs[part.leader], t, 0, part.leader_epoch,
                                    part.partition_epoch, (1, 2, 3))).ok
    assert m.apply(c.ElectLeaders("t", 0)).ok and partition(m, t, 0).leader == 1


def test_controlled_shutdown_round_trips_through_json():
    command = c.ControlledShutdown(2, 5)
    assert c.from_dict(c.to_dict(command)) == command


# -- preferred leaders (auto.leader.rebalance.enable) ---------------------------------------------------------
def test_imbalanced_leaders_names_partitions_whose_preferred_replica_is_a_live_isr_member():
    from freshet.controller.placement import imbalanced_leaders

    m, epochs = cluster(3)
    t = create(m, partitions=6)  # each broker the preferred replica of two partitions
    assert imbalanced_leaders(m, 10) == []
    assert m.apply(c.ControlledShutdown(1, epochs[1])).ok  # broker 1's two leaderships move away
    assert imbalanced_leaders(m, 10) == []  # broker 1 may not lead while it shuts down
    assert m.apply(c.CloseBrokerSession(1, epochs[1])).ok
    epoch = register(m, 1, now_ms=3000, incarnation="again")
    assert m.apply(c.BrokerHeartbeat(1, epoch, 3000)).ok
    assert imbalanced_leaders(m, 10) == []  # back, but not yet in the ISRs
    for i, part in enumerate(m.topics[t].partitions):
        assert m.apply(c.AlterPartition(part.leader, epochs[part.leader], t, i, part.leader_epoch,
                                        part.partition_epoch, tuple(part.replicas))).ok
    mine = [("t", i) for i, p in enumerate(m.topics[t].partitions) if p.replicas[0] == 1]
    assert len(mine) == 2 and imbalanced_leaders(m, 10) == mine
    assert imbalanced_leaders(m, 100) == []  # 2 of 2 elsewhere is 100 %, not above it
    for topic, index in mine:
        assert m.apply(c.ElectLeaders(topic, index)).ok
    assert imbalanced_leaders(m, 0) == []


def test_leader_balance_settings_are_checked():
    import pytest

    from freshet.controller.placement import LeaderBalance

    with pytest.raises(ValueError, match="interval"):
        LeaderBalance(check_interval_s=0)
    with pytest.raises(ValueError, match="percentage"):
        LeaderBalance(per_broker_percentage=101)


# -- racks -----------------------------------------------------------------------------------------------------
def test_rack_aware_placement_follows_kafkas_figures():
    """AdminUtilsTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers, Kafka's own figures."""
    from freshet.controller.placement import place_replicas_rack_aware, rack_alternated

    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({b: r for b, r in racks.items() if b != 5}) == [0, 3, 1, 4, 2]
    assert place_replicas_rack_aware(racks, 7, 3, 0, 0) == [
        [0, 3, 1], [3, 1, 5], [1, 5, 4], [5, 4, 2], [4, 2, 0], [2, 0, 3], [0, 4, 2]]


def test_every_partition_spans_as_many_racks_as_it_can_and_replicas_spread_evenly():
    from collections import Counter

    from freshet.controller.placement import place_replicas_rack_aware

    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    for start in range(6):
        for shift in range(6):
            assignment = place_replicas_rack_aware(racks, 12, 3, start, shift)
            assert all(len({racks[b] for b in replicas}) == 3 for replicas in assignment)
            assert set(Counter(b for replicas in assignment for b in replicas).values()) == {6}
            assert set(Counter(replicas[0] for replicas in assignment).values()) == {2}
            two = place_replicas_rack_aware(racks, 12, 2, start, shift)
            assert all(len({racks[b] for b in replicas}) == 2 for replicas in two)
    # two racks, three replicas: both racks hold one, no broker twice
    assert all(len({racks[b] for b in r}) == 2 and len(set(r)) == 3
               for r in place_replicas_rack_aware({1: "a", 2: "a", 3: "b", 4: "b"}, 8, 3, 1, 2))


def test_create_topic_and_partitions_place_replicas_across_the_brokers_racks():
    m = ClusterMetadataWithRacks({1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"})
    assert m.apply(c.CreateTopic("racked", "id-r", 6, 3, start_index=0, shift=0)).ok
    assert m.apply(c.CreatePartitions("racked", 9, start_index=3, shift=1)).ok
    rack = {b.broker_id: b.rack for b in m.brokers.values()}
    assert all(len({rack[r] for r in p.replicas}) == 3 for p in m.topics["id-r"].partitions)


def ClusterMetadataWithRacks(racks: dict[int, str]):  # noqa: N802 (reads as the thing it makes)
    from freshet.controller.state import ClusterMetadata

    m = ClusterMetadata()
    for b, rack in racks.items():
        epoch = m.apply(c.RegisterBroker(b, f"inc-{b}", "127.0.0.1", 9090 + b, 1000, rack=rack)).value["broker_epoch"]
        assert m.apply(c.BrokerHeartbeat(b, epoch, 1000)).ok
    return m


# -- plans: decommission and rebalance ------------------------------------------------------------------------
def test_a_decommission_plan_replaces_the_broker_everywhere_with_the_least_loaded_others():
    import pytest

    from freshet.controller.placement import PlanError, balance_counts, decommission_plan

    m, epochs = cluster(4)
    create(m, partitions=8, rf=3)
    snapshot = m.snapshot()
    plan = decommission_plan(snapshot, 2)
    hosted = {("t", i) for i, p in enumerate(m.topics["id-t"].partitions) if 2 in p.replicas}
    assert set(plan) == hosted
    for (_, i), replicas in plan.items():
        old = m.topics["id-t"].partitions[i].replicas
        assert 2 not in replicas and len(set(replicas)) == 3
        assert [r for r in replicas if r in old] == [r for r in old if r != 2]  # the others keep their places
    replicas, _ = balance_counts(snapshot, {**{("t", i): p.replicas for i, p in enumerate(m.topics["id-t"].partitions)},
                                            **plan})
    assert replicas[2] == 0 and max(replicas[b] for b in (1, 3, 4)) - min(replicas[b] for b in (1, 3, 4)) <= 1
    with pytest.raises(PlanError, match="is not registered"):
        decommission_plan(snapshot, 9)
    m3, _ = cluster(3)
    create(m3, partitions=2, rf=3)
    with pytest.raises(PlanError, match=r"would leave t-0 \(replication factor 3\) and 1 other partition\(s\) with "
                                        r"more replicas than the 2 other live broker\(s\)"):
        decommission_plan(m3.snapshot(), 1)


def test_a_decommission_plan_keeps_a_partition_across_racks():
    from freshet.controller.placement import decommission_plan

    m = ClusterMetadataWithRacks({1: "a", 2: "a", 3: "b", 4: "b"})
    assert m.apply(c.CreateTopic("r", "id-r", 4, 2, start_index=0, shift=0)).ok
    rack = {b: m.brokers[b].rack for b in m.brokers}
    for replicas in decommission_plan(m.snapshot(), 3).values():
        assert {rack[r] for r in replicas} == {"a", "b"}


def test_a_rebalance_plan_spreads_replicas_and_leaders_onto_a_new_broker_within_one_of_the_mean():
    from freshet.controller.placement import balance_counts, balanced, rebalance_plan

    m, epochs = cluster(3)
    create(m, partitions=6, rf=2)
    e4 = register(m, 4, now_ms=2000)
    assert m.apply(c.BrokerHeartbeat(4, e4, 2000)).ok
    snapshot = m.snapshot()
    replicas, leaders = balance_counts(snapshot)
    assert replicas[4] == 0 and not balanced(replicas)
    plan = rebalance_plan(snapshot)
    current = {("t", i): p.replicas for i, p in enumerate(m.topics["id-t"].partitions)}
    replicas, leaders = balance_counts(snapshot, {**current, **plan})
    assert balanced(replicas) and balanced(leaders) and replicas[4] == 3 and leaders[4] >= 1
    assert all(len(set(r)) == 2 for r in plan.values())
    # applied (here by hand), nothing is left to move
    for (_, i), new in plan.items():
        m.topics["id-t"].partitions[i].replicas = list(new)
    assert rebalance_plan(m.snapshot()) == {}


def test_a_decommission_plan_over_a_partition_in_motion_works_on_the_moves_target():
    """During a move a partition's replicas are its target followed by those being removed: the plan replaces
    the broker in the target (keeping the replication factor), and a broker only being moved away from needs
    nothing."""
    from freshet.controller.placement import decommission_plan

    m, _ = cluster(4)
    create(m, partitions=1, rf=3)
    old = m.topics["id-t"].partitions[0].replicas
    leaving = old[0]
    new = [b for b in old if b != leaving] + [next(b for b in (1, 2, 3, 4) if b not in old)]
    assert m.apply(c.AlterPartitionReassignment("t", 0, tuple(new))).ok
    snapshot = m.snapshot()
    assert len(snapshot["topics"][0]["partitions"][0]["replicas"]) == 4  # in motion: target + the one removed
    assert decommission_plan(snapshot, leaving) == {}
    kept = new[0]
    plan = decommission_plan(snapshot, kept)
    assert list(plan) == [("t", 0)]
    assert len(plan[("t", 0)]) == 3 and kept not in plan[("t", 0)] and set(new[1:]) <= set(plan[("t", 0)])


def test_a_plan_refused_in_part_changes_nothing():
    """``Operations.apply`` sends a plan partition by partition; when the controllers refuse one, the moves it
    already started are cancelled before the error, so a rebalance or decommission is never left half done."""
    import pytest

    from freshet.controller.operations import Operations
    from freshet.controller.placement import PlanError

    m, _ = cluster(4)
    create(m, partitions=2, rf=2)
    before = m.snapshot()

    class InProcess(Operations):  # the controllers' answers, from the state machine itself
        def command(self, command: dict) -> dict:
            return m.apply(c.from_dict(command)).to_dict()

        def metadata(self) -> dict:
            return m.snapshot()

    ops = InProcess([("127.0.0.1", 1)], timeout_s=5)
    first = [b for b in (1, 2, 3, 4) if b not in m.topics["id-t"].partitions[0].replicas]
    plan = {("t", 0): first, ("t", 1): [9, 1]}  # broker 9 is not registered: the second move is refused
    with pytest.raises(PlanError, match=r"t-1 .*INVALID_REPLICA_ASSIGNMENT.*the 1 move\(s\) started before it "
                                        r"were cancelled"):
        ops.apply(plan)
    after = m.snapshot()
    assert [(p["replicas"], p.get("adding_replicas"), p.get("removing_replicas"))
            for p in after["topics"][0]["partitions"]] == \
           [(p["replicas"], p.get("adding_replicas"), p.get("removing_replicas"))
            for p in before["topics"][0]["partitions"]]
