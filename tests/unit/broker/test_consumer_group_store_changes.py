"""The KIP-848 group store writes only what a heartbeat changed (``consumer_records.ConsumerGroupStore``): each
batch it writes holds exactly the records a whole re-encoding of the group would find changed against the log
(joins, subscription changes, revocations, static leaves and returns, leaves, expiries, new topics, a topic made
again under a new id, a failed write, the group's deletion), and a heartbeat that changes nothing encodes nothing,
however large the group."""

import pytest

from freshet.broker.groups import consumer_records as cr
from freshet.broker.groups.consumer import UNREVOKED, ConsumerGroupCoordinator
from freshet.broker.groups.offsets import OffsetStore, batches_below
from freshet.format.record_batch import decode_records

from .test_consumer_group_records import registry  # noqa: F401 (the fixture: orders, 4 partitions; payments, 2)


class Checked:
    """A coordinator with its store, where every write is checked against the reference: the whole group encoded
    again (``group_records``) and diffed against the records the log held before."""

    def __init__(self, registry, check: bool = True) -> None:
        self.coordinator = ConsumerGroupCoordinator(registry)
        self.store = cr.ConsumerGroupStore(self.coordinator, OffsetStore(registry))
        self.log = self.store.offsets.partition
        self.reference: dict[str, dict[bytes, bytes]] = {}  # group id -> what the log holds
        self.writes = 0
        self.errors: list[AssertionError] = []  # the coordinator logs what on_change raises and goes on
        self.coordinator.on_change = self.changed if check else self.store.changed

    def checked(self, result=None):
        if self.errors:
            raise self.errors[0]
        return result

    def changed(self, group_id):
        try:
            return self._changed(group_id)
        except AssertionError as exc:
            self.errors.append(exc)
            raise

    def _changed(self, group_id):
        start = self.log.log_end_offset
        result = self.store.changed(group_id)
        group = self.coordinator.groups.get(group_id)
        now = cr.group_records(self.coordinator, group) if group is not None else {}
        before = self.reference.get(group_id, {})
        expected = {k: v for k, v in now.items() if before.get(k) != v} | {k: None for k in before if k not in now}
        written = self.appended(start)
        assert written == expected
        assert (result is None) == (not expected)
        self.reference[group_id] = now
        self.writes += bool(written)
        assert self.store.written.get(group_id, {}) == now
        assert cr.read(self.log).get(group_id, {}) == now
        return result

    def appended(self, start: int) -> dict[bytes, bytes | None]:
        out: dict[bytes, bytes | None] = {}
        batches = [batch for header, batch in batches_below(self.log, self.log.log_end_offset)
                   if header.base_offset >= start]
        assert len(batches) <= 1  # a heartbeat's records: one batch, written all or none
        for batch in batches:
            for record in decode_records(batch):
                out[bytes(record.key)] = None if record.value is None else bytes(record.value)
        return out

    def beat(self, member_id, epoch, topics=None, regex=None, owned=None, instance_id=None, rack_id=None):
        return self.checked(self.coordinator.heartbeat(
            "g", member_id, epoch, instance_id=instance_id, rack_id=rack_id,
            rebalance_timeout_ms=45000 if epoch == 0 else -1,
            subscribed_names=tuple(topics) if topics is not None else None, subscribed_regex=regex,
            server_assignor=None, owned={} if owned is None else owned, client_id=f"c-{member_id}",
            client_host="127.0.0.1", version=1))

    def expire(self):
        self.checked(self.coordinator.expire())

    def delete(self):
        self.checked(self.coordinator.delete("g"))

    def settle(self, skip=()):
        """Heartbeats owning what each member was given (``skip``: members that stay silent), until stable."""
        for _ in range(10):
            group = self.coordinator.group("g")
            if group.state == "Stable":
                return group
            for m in list(group.members.values()):
                if m.member_id not in skip and m.epoch >= 0:
                    self.beat(m.member_id, m.epoch, owned=m.assigned)
        raise AssertionError(f"group not stable: {self.coordinator.group('g').state}")


def test_each_write_holds_what_a_whole_encoding_finds_changed(registry):
    c = Checked(registry)
    c.beat("m-1", 0, topics=("orders", "payments"))
    group = c.settle()
    c.beat("m-2", 0, topics=("orders", "payments"), instance_id="static-2")
    c.beat("m-3", 0, regex="pay.*|refunds")
    m1 = group.members["m-1"]
    c.beat("m-1", m1.epoch, owned=m1.assigned)
    assert m1.state == UNREVOKED  # told to give partitions up to the newcomers
    c.settle()
    # a subscription change, a rack, a rebalance timeout: the member's own record
    c.beat("m-1", m1.epoch, topics=("orders",), owned=m1.assigned)
    c.settle()
    c.beat("m-1", m1.epoch, owned=m1.assigned, rack_id="rack-a")
    # a topic the regex matches appears: the group's subscribed topics move
    registry.create("refunds", 3)
    c.beat("m-3", group.members["m-3"].epoch, owned=group.members["m-3"].assigned)
    c.settle()
    registry.add_partitions("orders", 6)
    c.settle()
    # a topic made again under a new id, the same partitions: every record naming it changes
    before_id = registry.get("payments").topic_id
    registry.delete("payments")
    registry.create("payments", 2)
    assert registry.get("payments").topic_id != before_id
    m2 = group.members["m-2"]
    c.beat("m-2", m2.epoch, owned=m2.assigned)
    assert cr.read(c.log)["g"] == cr.group_records(c.coordinator, group)
    # the static member leaves for a while and returns under a new member id
    c.beat("m-2", -2, instance_id="static-2")
    c.beat("m-2b", 0, topics=("orders", "payments"), instance_id="static-2")
    assert "m-2" not in group.members and "m-2b" in group.members
    c.settle()
    # a member that does not revoke in time is fenced; one that stops heartbeating expires
    c.beat("m-4", 0, topics=("orders", "payments", "refunds"))
    revoking = [m for m in group.members.values() if m.member_id != "m-4"]
    for m in revoking:
        c.beat(m.member_id, m.epoch, owned=m.assigned)
    late = next(m for m in revoking if m.state == UNREVOKED)
    late.revocation_deadline -= 3600
    c.expire()
    assert late.member_id not in group.members
    c.settle()
    group.members["m-3"].last_seen -= 3600
    c.expire()
    assert "m-3" not in group.members
    c.settle()
    # a leave, the last ones, the group's deletion: tombstones
    for mid in list(group.members):
        c.beat(mid, -1)
    c.delete()
    assert cr.read(c.log) == {} and c.store.written == {} and c.store.encoded == {}
    assert c.writes >= 25


def test_a_failed_write_is_made_good_by_the_next_change(registry, monkeypatch):
    c = Checked(registry)
    c.beat("m-1", 0, topics=("orders", "payments"))
    group = c.settle()
    append = c.log.append

    def refuse(batch):
        raise OSError("disk full")

    monkeypatch.setattr(c.log, "append", refuse)
    c.coordinator.on_change = c.store.changed  # unchecked: the write fails, the group goes on in memory
    body = c.beat("m-2", 0, topics=("orders",))
    assert body["written"] is None and "m-2" in group.members
    monkeypatch.setattr(c.log, "append", append)
    c.coordinator.on_change = c.changed
    m1 = group.members["m-1"]
    c.reference["g"] = cr.read(c.log)["g"]  # what the log holds: the join never reached it
    c.beat("m-1", m1.epoch, owned=m1.assigned)
    assert cr.read(c.log)["g"] == cr.group_records(c.coordinator, group)


def test_a_group_taken_over_is_encoded_whole_once_then_by_change(registry, monkeypatch):
    c = Checked(registry)
    c.beat("m-1", 0, topics=("orders", "payments"))
    c.beat("m-2", 0, topics=("orders", "payments"))
    c.settle()
    fresh = Checked(registry)
    cr.restore(fresh.store, cr.read(c.log))
    fresh.reference = {g: dict(r) for g, r in cr.read(c.log).items()}
    group = fresh.coordinator.group("g")
    end = fresh.log.log_end_offset
    for m in list(group.members.values()):
        fresh.beat(m.member_id, m.epoch, owned=m.assigned)  # nothing changed: nothing written
    assert fresh.log.log_end_offset == end and set(fresh.store.encoded) == {"g"}
    fresh.beat("m-2", -1)
    assert set(cr.read(fresh.log)["g"]) == set(cr.group_records(fresh.coordinator, group))


def test_a_heartbeat_that_changes_nothing_encodes_nothing_in_a_large_group(registry, monkeypatch):
    checked = Checked(registry, check=False)
    c, store = checked.coordinator, checked.store
    for i in range(500):
        checked.beat(f"m-{i:03d}", 0, topics=("orders", "payments"))
    group = checked.settle()
    assert len(group.members) == 500
    encoded = []
    for name in ("_group_values", "_member_value", "_target_value", "_current_value"):
        real = getattr(cr, name)
        monkeypatch.setattr(cr, name, lambda *a, _real=real, _name=name: encoded.append(_name) or _real(*a))
    end = store.offsets.partition.log_end_offset
    for m in list(group.members.values()):
        body = checked.beat(m.member_id, m.epoch, owned=m.assigned)
        assert body["written"] is None
    assert encoded == [] and store.offsets.partition.log_end_offset == end
    # one member's own record changes (its rack): that record alone is encoded and written
    m = group.members["m-250"]
    body = checked.beat(m.member_id, m.epoch, owned=m.assigned, rack_id="rack-b")
    assert encoded == ["_member_value"] and body["written"] == end
    assert cr.read(store.offsets.partition)["g"] == cr.group_records(c, group)


def test_the_subscribed_topics_follow_joins_subscription_changes_and_leaves(registry):
    """A heartbeat looks the subscribed topics up per distinct subscription (kept until a member joins, leaves or
    changes its own): the group's topics are still every member's."""
    registry.create("refunds", 1)
    c = Checked(registry)
    c.beat("m-1", 0, topics=("orders",))
    group = c.settle()
    assert group.topics_seen == (("orders", 4),)
    c.beat("m-2", 0, topics=("orders",), regex="ref.*")
    assert c.coordinator.subscribed_by_group("g") == {"orders", "refunds"}
    c.settle()
    assert group.topics_seen == (("orders", 4), ("refunds", 1)) and group.target["m-2"]["refunds"] == {0}
    c.beat("m-1", group.members["m-1"].epoch, topics=("payments",), owned=group.members["m-1"].assigned)
    c.settle()
    assert group.topics_seen == (("orders", 4), ("payments", 2), ("refunds", 1))
    assert set(group.target["m-1"]) == {"payments"} and set(group.target["m-2"]) == {"orders", "refunds"}
    c.beat("m-2", -1)
    c.settle()
    assert group.topics_seen == (("payments", 2),) and c.coordinator.subscribed_by_group("g") == {"payments"}
    c.beat("m-3", 0, topics=("refunds",), instance_id="s-3")
    c.settle()
    c.beat("m-3", -2, instance_id="s-3")
    c.beat("m-3b", 0, topics=("refunds",), instance_id="s-3")  # back under a new id, its subscription kept
    c.settle()
    assert c.coordinator.subscribed_by_group("g") == {"payments", "refunds"} and set(group.target) == {"m-1", "m-3b"}
    group.members["m-1"].last_seen -= 3600
    c.expire()
    c.beat("m-3b", group.members["m-3b"].epoch, owned=group.members["m-3b"].assigned)
    assert group.topics_seen == (("refunds", 1),) and c.coordinator.subscribed_by_group("g") == {"refunds"}
