"""A KIP-848 consumer group (group.protocol=consumer) is taken over by the next coordinator when its coordinator
(the leader of ``__consumer_offsets``) is killed -9: the new one replays the group's ConsumerGroup* records, so the
member goes on at its epoch with its partition, with no new assignment (it got UNKNOWN_MEMBER_ID and rejoined
from epoch 0 after each kill before)."""

import pytest

from freshet.local.cluster import LocalCluster

from .test_kill_leader import kill_the_leader_over_and_over


@pytest.mark.timeout(900)
def test_a_consumer_protocol_member_keeps_its_assignment_when_its_coordinator_is_killed_9(tmp_path):
    with LocalCluster(3, directory=str(tmp_path / "cluster")) as cluster:
        seen = kill_the_leader_over_and_over(cluster, 2, topic="kip848", group_protocol="consumer")
    group = seen["group"]
    assert seen["coordinator_kills"] >= 1, seen["leaders"]
    assert not group["errors"] and not group["mismatched"] and not group["rewinds_without_rebalance"], group
    assert group["assignments"] == 1, f"the member was assigned again after a coordinator kill: {group}"
    assert group["rewinds"] == 0 and group["missing_offsets"] == 0 and group["out_of_order"] == 0, group
    assert group["committed"] == group["committed_by_member"] == seen["end_offset"], group
