"""message.timestamp.type=LogAppendTime (the broker's clock stamped in each batch, CRC recomputed, kept by
compaction) and message.timestamp.before/after.max.ms (records too far from the clock refused, nothing written)."""

import time

import pytest

from freshet.format.record_batch import (
    TIMESTAMP_TYPE_FLAG,
    decode_records,
    encode_batch,
    iter_batches,
    validate_batches,
)
from freshet.log import LogConfig, Partition
from freshet.log.cleaner import compact
from freshet.log.errors import InvalidTimestampError

HOUR = 3600 * 1000


def batches(p: Partition):
    return list(iter_batches(p.read(0, 1 << 20)))


def test_log_append_time_is_stamped_in_every_batch_with_a_valid_crc(tmp_path):
    p = Partition(str(tmp_path / "p"), LogConfig(message_timestamp_type="LogAppendTime"))
    before = int(time.time() * 1000)
    first = p.append(encode_batch([(b"k", b"a", 1000), (b"k", b"b", 2000)]))
    second = p.append(encode_batch([(b"k", b"c", 3000)]) + encode_batch([(b"k", b"d", 4000)]))
    after = int(time.time() * 1000)
    assert before <= first.log_append_time <= second.log_append_time <= after
    p.flush()
    data = p.read(0, 1 << 20)
    headers = validate_batches(data)  # CRC-32C checked
    assert len(headers) == 3 and all(h.attributes & TIMESTAMP_TYPE_FLAG for h in headers)
    stamped = [r.timestamp for _, b in iter_batches(data) for r in decode_records(b)]
    assert stamped == [first.log_append_time] * 2 + [second.log_append_time] * 2


def test_create_time_topics_keep_the_producers_timestamps(tmp_path):
    p = Partition(str(tmp_path / "p"), LogConfig())
    assert p.append(encode_batch([(b"k", b"a", 1000)])).log_append_time == -1
    p.flush()
    (header, batch), = batches(p)
    assert not header.attributes & TIMESTAMP_TYPE_FLAG and [r.timestamp for r in decode_records(batch)] == [1000]


def test_compaction_keeps_log_append_time(tmp_path):
    p = Partition(str(tmp_path / "p"), LogConfig(segment_bytes=300, cleanup_policy="compact",
                                                 message_timestamp_type="LogAppendTime"))
    stamps = {}
    for i in range(40):
        appended = p.append(encode_batch([(b"key-%d" % (i % 3), b"v%d" % i, 5), (b"other", b"x", 5)]))
        stamps[appended.base_offset] = appended.log_append_time
    p.flush()
    assert compact(p, int(time.time() * 1000) + HOUR).segments_rewritten > 0
    data = p.read(0, 1 << 20)
    validate_batches(data)
    for header, batch in iter_batches(data):
        assert header.attributes & TIMESTAMP_TYPE_FLAG
        for r in decode_records(batch):
            assert r.timestamp == header.max_timestamp  # each record at its own batch's append time
            assert r.timestamp == stamps[r.offset if r.offset in stamps else r.offset - 1]


@pytest.mark.parametrize("timestamp_offset, config", [
    (-2 * HOUR, {"message_timestamp_before_max_ms": HOUR}),
    (2 * HOUR, {"message_timestamp_after_max_ms": HOUR}),
])
def test_timestamps_too_far_from_the_clock_are_refused_and_nothing_is_written(tmp_path, timestamp_offset, config):
    p = Partition(str(tmp_path / "p"), LogConfig(**config))
    now = int(time.time() * 1000)
    p.append(encode_batch([(b"k", b"fine", now)]))
    with pytest.raises(InvalidTimestampError, match="message.timestamp"):
        p.append(encode_batch([(b"k", b"fine", now), (b"k", b"off", now + timestamp_offset)]))
    assert p.log_end_offset == 1
    # LogAppendTime ignores the producer's timestamps, bounds or not
    q = Partition(str(tmp_path / "q"), LogConfig(message_timestamp_type="LogAppendTime", **config))
    assert q.append(encode_batch([(b"k", b"old", now + timestamp_offset)])).log_append_time >= now
