"""Compaction rewrites a batch whose records it partly removes: header keys that are not UTF-8 (Kafka accepts them)
survive the rewrite byte for byte (the cleaner raised UnicodeDecodeError on them before)."""

from freshet.format.record_batch import decode_records, encode_batch, iter_batches
from freshet.log import LogConfig, Partition
from freshet.log.cleaner import compact

HOUR = 3600 * 1000
ODD = (("\udcff\udcfetrace", b"t-1"), ("plain", None))


def test_a_rewritten_batch_keeps_header_keys_that_are_not_utf8(tmp_path):
    p = Partition(str(tmp_path / "p"), LogConfig(segment_bytes=200, cleanup_policy="compact", delete_retention_ms=HOUR))
    now = 50 * HOUR
    p.append(encode_batch([(b"a", b"old", now - HOUR, ODD), (b"b", b"kept", now - HOUR, ODD)]))
    for i in range(4):  # newer values of "a", and closed segments behind them
        p.append(encode_batch([(b"a", b"new-%d" % i, now - HOUR + i, ODD)]))
    p.flush()
    stats = compact(p, now)
    assert stats.segments_rewritten > 0 and stats.records_removed > 0
    survivors = []
    for segment in p.segments:
        data = segment.read(0, segment.size)
        assert data.count(b"\xff\xfetrace") == sum(h.records_count for h, _ in iter_batches(data))
        survivors += [r for _, batch in iter_batches(data) for r in decode_records(batch)]
    values = [(r.key, r.value) for r in survivors]
    assert values[0] == (b"b", b"kept") and (b"a", b"old") not in values  # the first batch rewritten without "a"
    assert values[-1] == (b"a", b"new-3")
    assert {r.headers for r in survivors} == {ODD}
