"""Where replicas and leaders go, beyond one command: what the active controller decides by looking at the whole
metadata (the state machine in ``state`` stays a function of each command).

- **Preferred leaders** (``auto.leader.rebalance.enable``, as Kafka's controller): every
  ``leader.imbalance.check.interval.seconds`` the active controller counts, per broker, the partitions whose
  preferred replica (the first) it is and which another broker leads; above ``leader.imbalance.per.broker.
  percentage`` of them, each such partition whose preferred replica is a live ISR member gets a preferred
  election. After a rolling restart or a failover the leaders go back where the placement spread them.
- **Racks** (``broker.rack``): a new topic's replicas are spread over the racks with Kafka's rack-aware
  assignment (``AdminUtils.assignReplicasToBrokersRackAware``) once any broker has a rack; a broker without one
  counts as a rack of its own.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_S = 300.0  # Kafka's leader.imbalance.check.interval.seconds
DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE = 10  # leader.imbalance.per.broker.percentage


@dataclass(frozen=True)
class LeaderBalance:
    """The controller's ``auto.leader.rebalance.enable`` and its two settings."""

    enabled: bool = True
    check_interval_s: float = DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_S
    per_broker_percentage: int = DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE

    def __post_init__(self) -> None:
        if self.check_interval_s <= 0:
            raise ValueError("leader.imbalance.check.interval.seconds must be positive")
        if not 0 <= self.per_broker_percentage <= 100:
            raise ValueError("leader.imbalance.per.broker.percentage must be between 0 and 100")


def imbalanced_leaders(metadata, percentage: int) -> list[tuple[str, int]]:
    """The partitions a preferred election should give back to their first replica: those of every broker whose
    share of partitions led by another broker (of those it is the preferred replica of) is above
    ``percentage``, where it is a live ISR member, and that are not being reassigned."""
    live = set(metadata.unfenced())
    preferred: dict[int, list[tuple[str, int, bool, bool]]] = defaultdict(list)  # (topic, p, led, electable)
    for topic in sorted(metadata.topics.values(), key=lambda t: t.name):
        for index, part in enumerate(topic.partitions):
            if not part.replicas:
                continue
            first = part.replicas[0]
            moving = getattr(part, "adding_replicas", ()) or getattr(part, "removing_replicas", ())
            electable = first in live and first in part.isr and not moving
            preferred[first].append((topic.name, index, part.leader == first, electable))
    elections = []
    for _, partitions in sorted(preferred.items()):
        elsewhere = [(t, i, electable) for t, i, led, electable in partitions if not led]
        if 100 * len(elsewhere) / len(partitions) > percentage:
            elections.extend((t, i) for t, i, electable in elsewhere if electable)
    return elections


def rack_alternated(racks: dict[int, str | None]) -> list[int]:
    """Kafka's ``getRackAlternatedBrokerList``: the brokers taken one rack at a time (racks in name order, the
    brokers of each in id order), so that neighbours in the list sit in different racks."""
    by_rack: dict[str, list[int]] = defaultdict(list)
    for broker in sorted(racks):
        by_rack[racks[broker] or ""].append(broker)
    names = sorted(by_rack)
    queues = [list(by_rack[name]) for name in names]
    arranged: list[int] = []
    index = 0
    while len(arranged) < len(racks):
        if queues[index]:
            arranged.append(queues[index].pop(0))
        index = (index + 1) % len(queues)
    return arranged


def place_replicas_rack_aware(racks: dict[int, str | None], partitions: int, replication_factor: int,
                              start_index: int, shift: int) -> list[list[int]]:
    """Kafka's rack-aware replica assignment (``AdminUtils.assignReplicasToBrokersRackAware``): the first replica
    of partition p is the rack-alternated broker list's ``(start_index + p) mod n``; each next replica is the
    next broker, at a shift that grows each time the first replica wraps round, skipping a broker whose rack
    has a replica while some rack has none, and a broker that has one while some broker has none. Replicas of a
    partition span min(replication factor, racks) racks; leaders and followers spread evenly."""
    arranged = rack_alternated(racks)
    n, rack_count = len(arranged), len({r or "" for r in racks.values()})
    start_index %= n
    shift %= n
    assignment = []
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        leader = arranged[first]
        replicas, used_racks, used = [leader], {racks[leader] or ""}, {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[(first + 1 + (shift * rack_count + k) % (n - 1)) % n]
                rack = racks[broker] or ""
                k += 1
                if (rack not in used_racks or len(used_racks) == rack_count) and (
                        broker not in used or len(used) == n):
                    replicas.append(broker)
                    used_racks.add(rack)
                    used.add(broker)
                    break
        assignment.append(replicas)
    return assignment


# -- plans over a metadata snapshot (the JSON the controllers answer): decommission and rebalance -----------------
class PlanError(Exception):
    """A plan that cannot be made: the one line the CLI prints."""


Plan = dict[tuple[str, int], list[int]]  # (topic, partition) -> its new replicas, the preferred leader first


def live_brokers(snapshot: dict) -> list[int]:
    """Brokers that may take replicas: unfenced and not shutting down."""
    return sorted(b["broker_id"] for b in snapshot["brokers"] if not b["fenced"] and not b.get("shutting_down"))


def _partitions(snapshot: dict):
    for topic in sorted(snapshot["topics"], key=lambda t: t["name"]):
        for part in topic["partitions"]:
            yield (topic["name"], part["partition"]), part


def target_replicas(part: dict) -> list[int]:
    """The replicas a partition is to have: during a move its replicas are the target followed by the replicas
    being removed, which are left out here."""
    removing = set(part.get("removing_replicas") or ())
    return [r for r in part["replicas"] if r not in removing]


def decommission_plan(snapshot: dict, broker: int) -> Plan:
    """Every partition whose replicas (the target of a move in progress) include ``broker`` gets, in its place,
    a live broker it has no replica on: one whose rack its other replicas do not use first, then the one with
    the fewest replicas. A partition moving away from ``broker`` already needs nothing. PlanError when the
    broker is not registered, or when a partition would fall below its replication factor (fewer live brokers
    than replicas once it is gone)."""
    racks = {b["broker_id"]: b.get("rack") for b in snapshot["brokers"]}
    if broker not in racks:
        raise PlanError(f"broker {broker} is not registered")
    others = [b for b in live_brokers(snapshot) if b != broker]
    load = {b: 0 for b in others}
    for _, part in _partitions(snapshot):
        for r in target_replicas(part):
            if r in load:
                load[r] += 1
    hosted = [(key, target_replicas(part)) for key, part in _partitions(snapshot) if broker in target_replicas(part)]
    short = [(key, replicas) for key, replicas in hosted if len(replicas) > len(others)]
    if short:
        (topic, index), replicas = short[0]
        raise PlanError(f"decommissioning broker {broker} would leave {topic}-{index} (replication factor "
                        f"{len(replicas)}) and {len(short) - 1} other partition(s) with more replicas than "
                        f"the {len(others)} other live broker(s): add a broker first")
    plan: Plan = {}
    for key, replicas in hosted:
        rest = [r for r in replicas if r != broker]
        used = {racks.get(r) for r in rest}
        candidates = [b for b in others if b not in rest]
        chosen = min(candidates, key=lambda b: (racks.get(b) is not None and racks.get(b) in used, load[b], b))
        load[chosen] += 1
        plan[key] = [chosen if r == broker else r for r in replicas]
    return plan


def balance_counts(snapshot: dict, assignment: dict | None = None) -> tuple[dict[int, int], dict[int, int]]:
    """Replicas and preferred leaders (first replicas) per live broker, of ``assignment`` (default: the
    snapshot's)."""
    live = live_brokers(snapshot)
    assignment = assignment or {key: part["replicas"] for key, part in _partitions(snapshot)}
    replicas, leaders = dict.fromkeys(live, 0), dict.fromkeys(live, 0)
    for current in assignment.values():
        for r in current:
            if r in replicas:
                replicas[r] += 1
        if current and current[0] in leaders:
            leaders[current[0]] += 1
    return replicas, leaders


def rebalance_plan(snapshot: dict) -> Plan:
    """An even spread, as Cruise Control's simplest goals: replicas per live broker, then preferred leaders per
    live broker, within one of the mean. Replicas move from the most loaded broker to the least loaded one that
    the partition has no replica on (never into a rack its other replicas use, unless the moved one was in that
    rack too); then a partition's preferred leader changes by reordering its replicas. Partitions with a replica
    on a broker that is not live, or being reassigned, are left alone. The partitions whose replicas change."""
    live = live_brokers(snapshot)
    racks = {b["broker_id"]: b.get("rack") for b in snapshot["brokers"]}
    movable = {key: list(part["replicas"]) for key, part in _partitions(snapshot)
               if set(part["replicas"]) <= set(live) and not part.get("adding_replicas")
               and not part.get("removing_replicas")}
    original = {key: list(v) for key, v in movable.items()}
    assignment = {key: part["replicas"] for key, part in _partitions(snapshot)}

    def racks_ok(replicas: list[int], out: int, into: int) -> bool:
        rest = {racks.get(r) for r in replicas if r != out}
        return racks.get(into) is None or racks.get(into) == racks.get(out) or racks.get(into) not in rest

    while live:
        counts, _ = balance_counts(snapshot, {**assignment, **movable})
        move = next(((key, hi, lo) for hi in sorted(live, key=lambda b: (-counts[b], b))
                     for lo in sorted(live, key=lambda b: (counts[b], b)) if counts[hi] - counts[lo] > 1
                     for key, replicas in sorted(movable.items())
                     if hi in replicas and lo not in replicas and racks_ok(replicas, hi, lo)), None)
        if move is None:
            break
        key, hi, lo = move
        movable[key] = [lo if r == hi else r for r in movable[key]]
    while live:
        _, leaders = balance_counts(snapshot, {**assignment, **movable})
        swap = next(((key, hi, lo) for hi in sorted(live, key=lambda b: (-leaders[b], b))
                     for lo in sorted(live, key=lambda b: (leaders[b], b)) if leaders[hi] - leaders[lo] > 1
                     for key, replicas in sorted(movable.items()) if replicas[0] == hi and lo in replicas), None)
        if swap is None:
            break
        key, hi, lo = swap
        replicas = movable[key]
        i = replicas.index(lo)
        replicas[0], replicas[i] = lo, hi
    return {key: replicas for key, replicas in movable.items() if replicas != original[key]}


def balanced(counts: dict[int, int]) -> bool:
    """Every count within one of the mean."""
    return not counts or max(counts.values()) - min(counts.values()) <= 1


# -- manual replica assignments (CreateTopics / CreatePartitions with ``assignments``) -----------------------------
class AssignmentError(ValueError):
    """A manual replica assignment Kafka refuses with INVALID_REPLICA_ASSIGNMENT: the one line why."""


def ordered_assignment(pairs) -> list[list[int]]:
    """CreateTopics' ``assignments`` (``(partition index, broker ids)`` pairs, in any order) as one replica list
    per partition, partition 0 first. AssignmentError when a partition is given twice or the indexes are not
    0..n-1 (Kafka: "partitions should be a consecutive 0-based integer sequence")."""
    by_index: dict[int, list[int]] = {}
    for index, brokers in pairs:
        if index in by_index:
            raise AssignmentError(f"partition {index} is assigned more than once")
        by_index[index] = list(brokers)
    missing = next((i for i in range(len(by_index)) if i not in by_index), None)
    if missing is not None:
        raise AssignmentError(f"partition {missing} is not assigned: the partition ids of {len(by_index)} "
                              f"assignments must be 0..{len(by_index) - 1}, a consecutive 0-based sequence")
    return [by_index[i] for i in range(len(by_index))]


def check_added(topic: str, added: int, given: int) -> None:
    """CreatePartitions' assignments: one per partition added (AssignmentError otherwise)."""
    if given != added:
        raise AssignmentError(f"{added} partition(s) are added to {topic!r}, but {given} replica assignment(s) are "
                              "given")


def check_assignment(assignment, registered, live, replication_factor: int | None = None,
                     first_partition: int = 0) -> None:
    """A manual replica assignment (one replica list per partition, numbered from ``first_partition``; the first
    replica is the preferred leader) checked as Kafka's controller checks it (``validateManualPartitionAssignment``):
    AssignmentError for an empty list, a broker named twice in one partition, a broker not ``registered``, a partition
    none of whose brokers is ``live`` (all fenced or shutting down: none could lead; KRaft takes a fenced replica
    beside a live one, outside the ISR until it catches up), or a partition whose replica count differs from
    ``replication_factor`` (default: the first partition's)."""
    live = set(live)
    for index, replicas in enumerate(assignment, first_partition):
        replicas = list(replicas)
        if not replicas:
            raise AssignmentError(f"partition {index} is assigned an empty replica list")
        seen: set[int] = set()
        twice = next((r for r in replicas if r in seen or seen.add(r)), None)  # linear: lists come from clients
        if twice is not None:
            raise AssignmentError(f"partition {index} names broker {twice} more than once")
        unknown = [r for r in replicas if r not in registered]
        if unknown:
            raise AssignmentError(f"partition {index} is assigned to broker {unknown[0]}, which is not registered")
        if not any(r in live for r in replicas):
            raise AssignmentError(f"all brokers of partition {index}'s replica assignment ({replicas}) are fenced "
                                  "or shutting down")
        if replication_factor is None:
            replication_factor = len(replicas)
        elif len(replicas) != replication_factor:
            raise AssignmentError(f"partition {index} has {len(replicas)} replica(s), the other partitions "
                                  f"{replication_factor}: every partition needs the same replication factor")
