"""Short ranges of a microbatch are packed into few Spark tasks; long ones keep a task each."""

import pytest

pytest.importorskip("pyspark")

from freshet.spark.source import RangePack, TopicPartitionRange, pack_ranges  # noqa: E402


def rng(p, n):
    return TopicPartitionRange("t", p, 100, 100 + n, "b", False, True, {})


def flat(parts):
    return sorted((r.partition, r.start, r.end) for p in parts for r in (p.ranges if isinstance(p, RangePack) else [p]))


def test_live_sized_ranges_share_two_tasks():
    ranges = [rng(p, 2200) for p in range(6)]
    parts = pack_ranges(ranges, 5000)
    assert len(parts) == 2 and all(isinstance(p, RangePack) and len(p.ranges) == 3 for p in parts)
    assert flat(parts) == flat(ranges)  # every range read once


def test_long_ranges_keep_one_task_each_and_tiny_batches_one_task():
    ranges = [rng(0, 80_000), rng(1, 90_000), rng(2, 10), rng(3, 20)]
    parts = pack_ranges(ranges, 5000)
    assert len(parts) == 3 and isinstance(parts[2], RangePack) and flat(parts) == flat(ranges)
    assert pack_ranges([rng(0, 10)], 5000)[0].partition == 0


def test_packs_are_balanced():
    ranges = [rng(p, n) for p, n in enumerate([4000, 3000, 3000, 2000, 1000, 1000])]
    parts = pack_ranges(ranges, 5000)
    loads = sorted(sum(r.end - r.start for r in p.ranges) for p in parts)
    assert loads == [7000, 7000]


def test_at_most_max_partitions_tasks_of_about_equal_records():
    ranges = [rng(p, 83_000 + p) for p in range(6)]
    assert len(pack_ranges(ranges, 5000)) == 6  # no limit
    parts = pack_ranges(ranges, 5000, max_partitions=2)
    assert len(parts) == 2 and all(len(p.ranges) == 3 for p in parts) and flat(parts) == flat(ranges)
    assert len(pack_ranges(ranges, 5000, max_partitions=8)) == 6  # fewer ranges than allowed: one task each
    mixed = [rng(0, 100_000), rng(1, 40_000), rng(2, 40_000), rng(3, 300), rng(4, 200)]
    parts = pack_ranges(mixed, 5000, max_partitions=2)
    loads = sorted(sum(r.end - r.start for r in (p.ranges if isinstance(p, RangePack) else [p])) for p in parts)
    assert loads == [80_500, 100_000] and flat(parts) == flat(mixed)
