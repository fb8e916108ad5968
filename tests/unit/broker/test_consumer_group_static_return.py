"""A KIP-848 static member that leaves (epoch -2) and comes back under a new member id (epoch 0, same
group.instance.id), as Kafka's new group coordinator has it: what it was revoking is released when it leaves, and
back it takes over the old member's current assignment and is reconciled against the current target as any member;
a member that no longer owns the partitions it must give up is not made to wait for their revocation. Every write
of the group store is checked against a whole re-encoding (``Checked``)."""

from freshet.broker.groups.consumer import MEMBER_STABLE, UNREVOKED

from .test_consumer_group_records import registry  # noqa: F401 (the fixture: orders, 4 partitions; payments, 2)
from .test_consumer_group_store_changes import Checked

ALL = sorted({*(("orders", p) for p in range(4)), *(("payments", p) for p in range(2))})


def _static_group(registry):
    c = Checked(registry)
    c.beat("m-1", 0, topics=("orders", "payments"), instance_id="s-1")
    return c, c.settle()


def _owned(group) -> list:
    return sorted((t, p) for m in group.members.values() for t, ps in m.owns().items() for p in ps)


def test_a_static_member_leaving_while_revoking_releases_those_partitions_and_is_not_fenced_for_them(registry):
    c, group = _static_group(registry)
    c.beat("m-2", 0, topics=("orders", "payments"))
    m1, m2 = group.members["m-1"], group.members["m-2"]
    c.beat("m-1", m1.epoch, owned=m1.assigned, instance_id="s-1")
    assert m1.state == UNREVOKED and m1.pending_revocation
    kept = dict(m1.assigned)
    c.beat("m-1", -2, instance_id="s-1")  # away before it revoked: it consumes nothing now
    assert m1.pending_revocation == {} and m1.assigned == kept
    c.beat("m-2", m2.epoch, owned=m2.assigned)  # the new owner is not kept waiting for the member away
    assert m2.state == MEMBER_STABLE and m2.assigned == group.target["m-2"]
    assert _owned(group) == ALL
    m1.revocation_deadline -= 3600
    c.expire()  # it owes no revocation: it waits for its return until its session ends
    assert "m-1" in group.members and group.members["m-1"].epoch == -2


def test_a_static_member_back_after_the_target_moved_is_answered_with_what_it_should_own_now(registry):
    c, group = _static_group(registry)
    c.beat("m-1", -2, instance_id="s-1")
    c.beat("m-2", 0, topics=("orders", "payments"))  # the target gives m-2 half of m-1's partitions meanwhile
    m2 = group.members["m-2"]
    assert group.target["m-2"] and m2.assigned == {}  # they are kept for m-1
    epoch = group.epoch
    back = c.beat("m-1b", 0, topics=("orders", "payments"), instance_id="s-1")
    m1b = group.members["m-1b"]
    assert "m-1" not in group.members and group.epoch == epoch  # a static member back is no new member
    assert back["assignment"] == m1b.assigned == group.target["m-1b"]  # what it should own now, not what it left
    assert back["member_epoch"] == m1b.epoch == group.assignment_epoch and m1b.state == MEMBER_STABLE
    c.beat("m-2", m2.epoch, owned=m2.assigned)
    assert m2.assigned == group.target["m-2"] and m2.state == MEMBER_STABLE
    assert group.state == "Stable" and _owned(group) == ALL


def test_a_static_member_back_to_an_unchanged_target_keeps_its_partitions_at_the_same_epoch(registry):
    c, group = _static_group(registry)
    m1 = group.members["m-1"]
    left = (m1.epoch, dict(m1.assigned), group.epoch)
    c.beat("m-1", -2, instance_id="s-1")
    back = c.beat("m-1b", 0, topics=("orders", "payments"), instance_id="s-1")
    assert (back["member_epoch"], back["assignment"], group.epoch) == left
    assert group.state == "Stable"


def test_a_member_that_no_longer_owns_what_it_must_give_up_moves_on_at_once(registry):
    c, group = _static_group(registry)
    c.beat("m-2", 0, topics=("orders", "payments"))
    m1 = group.members["m-1"]
    keep = {t: ps & group.target["m-1"].get(t, frozenset()) for t, ps in m1.assigned.items()}
    body = c.beat("m-1", m1.epoch, owned={t: ps for t, ps in keep.items() if ps}, instance_id="s-1")
    assert m1.state == MEMBER_STABLE and m1.pending_revocation == {}  # Kafka: nothing of it owned, nothing to wait
    assert body["member_epoch"] == group.assignment_epoch and body["assignment"] == group.target["m-1"]
    assert c.settle().state == "Stable" and _owned(group) == ALL
