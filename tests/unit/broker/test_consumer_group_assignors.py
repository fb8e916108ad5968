"""The server-side assignors of KIP-848 consumer groups: balanced, sticky, subscriptions respected."""

import random

from freshet.broker.groups.consumer import range_assignment, uniform_assignment


def flatten(assignment):
    return {m: {(t, p) for t, ps in a.items() for p in ps} for m, a in assignment.items()}


def check_complete(assignment, subscriptions, partitions):
    owned = [tp for tps in flatten(assignment).values() for tp in tps]
    assert len(owned) == len(set(owned))  # no partition twice
    subscribed = set().union(*subscriptions.values())
    assert set(owned) == {(t, p) for t, n in partitions.items() if t in subscribed for p in range(n)}
    for m, tps in flatten(assignment).items():
        assert all(t in subscriptions[m] for t, _ in tps)


def test_uniform_is_balanced_and_keeps_partitions_where_they_were():
    partitions = {"a": 6, "b": 3}
    subs = {"m1": {"a", "b"}, "m2": {"a", "b"}}
    first = uniform_assignment(subs, partitions, {})
    check_complete(first, subs, partitions)
    assert sorted(len(v) for v in flatten(first).values()) == [4, 5]
    # a third member takes three partitions; the first two keep the rest of theirs
    subs["m3"] = {"a", "b"}
    second = uniform_assignment(subs, partitions, first)
    check_complete(second, subs, partitions)
    assert sorted(len(v) for v in flatten(second).values()) == [3, 3, 3]
    for m in ("m1", "m2"):
        assert flatten(second)[m] <= flatten(first)[m]
    # it leaves again: only its partitions move
    del subs["m3"]
    third = uniform_assignment(subs, partitions, second)
    for m in ("m1", "m2"):
        assert flatten(second)[m] <= flatten(third)[m]


def test_uniform_respects_different_subscriptions_on_random_groups():
    rng = random.Random(7)
    for _ in range(200):
        partitions = {f"t{i}": rng.randint(1, 8) for i in range(rng.randint(1, 4))}
        subs = {f"m{i}": set(rng.sample(sorted(partitions), rng.randint(1, len(partitions))))
                for i in range(rng.randint(1, 6))}
        previous = uniform_assignment(subs, partitions, {})
        check_complete(previous, subs, partitions)
        if len(set(map(frozenset, subs.values()))) == 1:  # same subscriptions: counts differ by at most one
            counts = [len(v) for v in flatten(previous).values()]
            assert max(counts) - min(counts) <= 1
        # members change and partitions are added: still complete, and a member never loses partitions
        # while others of the same topics hold more than it does + 1
        subs[f"m{rng.randint(0, 8)}"] = set(rng.sample(sorted(partitions), 1))
        partitions[rng.choice(sorted(partitions))] += 1
        check_complete(uniform_assignment(subs, partitions, previous), subs, partitions)


def test_range_gives_the_same_contiguous_ranges_of_co_partitioned_topics():
    subs = {"m1": {"a", "b"}, "m2": {"a", "b"}, "m3": {"a"}}
    partitions = {"a": 7, "b": 4}
    result = range_assignment(subs, partitions, {})
    check_complete(result, subs, partitions)
    assert {m: sorted(a.get("a", ())) for m, a in result.items()} == {"m1": [0, 1, 2], "m2": [3, 4], "m3": [5, 6]}
    assert {m: sorted(a.get("b", ())) for m, a in result.items()} == {"m1": [0, 1], "m2": [2, 3], "m3": []}
