import random

from freshet.format.record_batch import decode_records, encode_batch, iter_batches
from freshet.log import LogConfig, Partition
from freshet.log.cleaner import apply_retention, clean, compact

HOUR = 3600 * 1000


def records_from(p: Partition, start: int | None = None):
    out, offset = [], p.log_start_offset if start is None else start
    while offset < p.high_watermark:
        data = p.read(offset, 1 << 20)
        if not data:
            break
        for header, batch in iter_batches(data):
            out += [r for r in decode_records(batch) if r.offset >= offset]
            offset = header.last_offset + 1
    return out


def test_retention_by_time_deletes_old_segments_and_moves_log_start(tmp_path):
    p = Partition(str(tmp_path / "p"), LogConfig(segment_bytes=300, retention_ms=HOUR))
    now = 100 * HOUR
    for i in range(40):
        ts = now - 3 * HOUR if i < 20 else now - 60_000
        p.append(encode_batch([(b"k", b"v%02d" % i, ts)]))
    p.flush()
    before = len(p.segments)
    deleted = apply_retention(p, now)
    assert deleted > 0 and len(p.segments) == before - deleted
    assert p.log_start_offset > 0
    values = [r.value for r in records_from(p)]
    assert b"v39" in values and all(int(v[1:]) >= p.log_start_offset for v in values)
    assert all(r.timestamp >= now - HOUR or r.offset >= p.log_start_offset for r in records_from(p))
    assert len([v for v in values if int(v[1:]) < 20]) < 20


def test_retention_rolls_and_deletes_an_expired_active_segment(tmp_path):
    p = Partition(str(tmp_path / "p"), LogConfig(retention_ms=HOUR))
    for i in range(5):
        p.append(encode_batch([(b"k", b"old", 0)]))
    p.flush()
    apply_retention(p, 10 * HOUR)  # rolls the expired active segment
    p.flush()
    apply_retention(p, 10 * HOUR)
    assert p.log_start_offset == 5 and p.log_end_offset == 5 and records_from(p) == []
    assert p.append(encode_batch([(b"k", b"new", 10 * HOUR)])).base_offset == 5


def test_retention_by_bytes(tmp_path):
    p = Partition(str(tmp_path / "p"), LogConfig(segment_bytes=500, retention_bytes=1500, retention_ms=-1))
    for i in range(100):
        p.append(encode_batch([(b"k", b"x" * 40, i)]))
    p.flush()
    apply_retention(p, 0)
    assert p.size_bytes - p.active_segment.size < 1500 + 500
    assert sum(s.size for s in p.segments[1:]) < 1500
    assert records_from(p)[-1].offset == 99


def test_retention_never_runs_on_compact_only_topics(tmp_path):
    p = Partition(str(tmp_path / "p"), LogConfig(segment_bytes=200, retention_ms=1, cleanup_policy="compact"))
    for i in range(20):
        p.append(encode_batch([(b"k%d" % i, b"v", 0)]))
    p.flush()
    assert apply_retention(p, 10 * HOUR) == 0 and p.log_start_offset == 0


def test_compaction_keeps_latest_value_per_key_with_offsets_unchanged(tmp_path):
    rng = random.Random(5)
    p = Partition(str(tmp_path / "p"), LogConfig(segment_bytes=2000, cleanup_policy="compact",
                                                 delete_retention_ms=HOUR))
    now = 50 * HOUR
    expected: dict[bytes, tuple[int, bytes | None]] = {}
    for i in range(3000):
        key = b"key-%d" % rng.randrange(200)
        value = None if rng.random() < 0.15 else b"value-%d" % i
        offset = p.append(encode_batch([(key, value, now - 2 * HOUR + i)])).base_offset
        expected[key] = (offset, value)
    p.flush()
    before_active = p.active_segment.read(0, p.active_segment.size)
    stats = compact(p, now)
    assert stats.segments_rewritten > 0 and stats.records_removed > 0
    assert p.active_segment.read(0, p.active_segment.size) == before_active  # the active segment untouched
    got = records_from(p, 0)
    latest = {}
    for r in got:
        latest[r.key] = (r.offset, r.value)
    live_expected = {k: v for k, v in expected.items() if v[1] is not None}
    live_got = {k: v for k, v in latest.items() if v[1] is not None}
    assert live_got == live_expected  # exactly the latest value of every live key, at its original offset
    # no key appears twice among the closed segments' survivors
    closed_end = p.active_segment.base_offset
    closed_keys = [r.key for r in got if r.offset < closed_end]
    assert len(closed_keys) == len(set(closed_keys))
    # reopening reads the same
    p.close()
    q = Partition(str(tmp_path / "p"), LogConfig(segment_bytes=2000, cleanup_policy="compact"))
    assert [(r.offset, r.key, r.value) for r in records_from(q, 0)] == [(r.offset, r.key, r.value) for r in got]


def test_tombstones_are_kept_for_delete_retention_then_removed(tmp_path):
    p = Partition(str(tmp_path / "p"), LogConfig(segment_bytes=150, cleanup_policy="compact",
                                                 delete_retention_ms=HOUR))
    p.append(encode_batch([(b"a", b"1", 0)]))
    p.append(encode_batch([(b"a", None, 10)]))
    for i in range(10):
        p.append(encode_batch([(b"filler-%d" % i, b"x", 20)]))
    p.flush()
    compact(p, now_ms=30)
    assert [(r.key, r.value) for r in records_from(p, 0) if r.key == b"a"] == [(b"a", None)]
    compact(p, now_ms=2 * HOUR)
    assert [r for r in records_from(p, 0) if r.key == b"a"] == []


def test_clean_runs_both_for_compact_delete(tmp_path):
    p = Partition(str(tmp_path / "p"), LogConfig(segment_bytes=200, cleanup_policy="compact,delete",
                                                 retention_ms=HOUR))
    for i in range(30):
        p.append(encode_batch([(b"k%d" % (i % 3), b"v%d" % i, 0 if i < 15 else 10 * HOUR)]))
    p.flush()
    stats = clean(p, now_ms=10 * HOUR + 1)
    assert stats.segments_deleted > 0 and p.log_start_offset > 0
    values = {r.key: r.value for r in records_from(p)}
    assert values == {b"k0": b"v27", b"k1": b"v28", b"k2": b"v29"}


def test_compaction_never_moves_the_log_start_offset_even_when_it_empties_segments(tmp_path):
    """As in Kafka: a reader at offset 0 of a compacted topic gets the first record kept. (Moving the start
    made every reader at 0 get OffsetOutOfRange, and librdkafka's default reset, latest, skipped the lot.)"""
    config = LogConfig(segment_bytes=90, cleanup_policy="compact", delete_retention_ms=HOUR)
    p = Partition(str(tmp_path / "p"), config)
    for key in (b"a", b"b", b"a", b"b", b"a", b"c"):  # one record per segment: early segments fall empty
        p.append(encode_batch([(key, b"v", 0)]))
        p.roll()
    p.flush()
    segments_before = len(p.segments)
    clean(p, now_ms=2 * HOUR)
    assert p.log_start_offset == 0 and len(p.segments) < segments_before
    assert [(r.offset, r.key) for r in records_from(p, 0)] == [(3, b"b"), (4, b"a"), (5, b"c")]
    p.close()
    q = Partition(str(tmp_path / "p"), config)  # and after a restart
    assert q.log_start_offset == 0
    assert [(r.offset, r.key) for r in records_from(q, 0)] == [(3, b"b"), (4, b"a"), (5, b"c")]


def _lagging_partition(tmp_path, lag_ms):
    """Three closed segments (two written at 0, one 10 minutes before 10h) and an active one."""
    config = LogConfig(cleanup_policy="compact", min_compaction_lag_ms=lag_ms)
    p = Partition(str(tmp_path / "p"), config)
    young = 10 * HOUR - 600_000
    segments = [[(b"a", b"a1", 0), (b"b", b"b1", 0)], [(b"a", b"a2", 0)], [(b"a", b"a3", young), (b"b", b"b3", young)]]
    for segment in segments:
        p.append(encode_batch(segment))
        p.roll()
    p.append(encode_batch([(b"z", b"z", young)]))
    p.flush()
    return p


def test_min_compaction_lag_leaves_segments_with_younger_records_alone(tmp_path):
    """As in Kafka: compaction stops at the first segment whose newest record is younger than the lag; records
    there neither go nor make older ones of their key go."""
    p = _lagging_partition(tmp_path, HOUR)
    stats = compact(p, now_ms=10 * HOUR)
    assert stats.records_removed == 1  # a1: a2 is newer and old enough
    assert [(r.offset, r.value) for r in records_from(p, 0)] == [(1, b"b1"), (2, b"a2"), (3, b"a3"), (4, b"b3"),
                                                                 (5, b"z")]
    assert compact(p, now_ms=10 * HOUR + 60_000).records_removed == 0  # still within the lag
    # 50 minutes later the young segment is an hour old: the same segments, cleaned now (no new segment needed)
    stats = compact(p, now_ms=10 * HOUR + 50 * 60_000)
    assert stats.records_removed == 2
    assert [(r.offset, r.value) for r in records_from(p, 0)] == [(3, b"a3"), (4, b"b3"), (5, b"z")]


def test_without_a_lag_every_closed_segment_is_compacted(tmp_path):
    p = _lagging_partition(tmp_path, 0)
    assert compact(p, now_ms=10 * HOUR).records_removed == 3
    assert [r.value for r in records_from(p, 0)] == [b"a3", b"b3", b"z"]


def test_a_lag_lowered_live_is_honoured_at_once(tmp_path):
    p = _lagging_partition(tmp_path, 24 * HOUR)
    assert compact(p, now_ms=10 * HOUR).records_removed == 0  # nothing is a day old
    p.config = LogConfig(cleanup_policy="compact", min_compaction_lag_ms=60_000)
    assert compact(p, now_ms=10 * HOUR).records_removed == 3
