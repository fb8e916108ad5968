"""A partition's transaction index: open transactions hold the last stable offset back, aborted ones are
indexed for read_committed readers, and both are rebuilt when the partition reopens."""

import pytest

from freshet.format.control import marker_batch
from freshet.format.record_batch import TRANSACTIONAL_FLAG, encode_batch
from freshet.log import InvalidRecordError, Partition


def txn_batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    return encode_batch([(b"k", v, 1) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        attributes=TRANSACTIONAL_FLAG)


def test_last_stable_offset_and_aborted_index_survive_a_reopen(tmp_path):
    p = Partition(str(tmp_path))
    p.append(encode_batch([(b"k", b"plain", 1)]))  # 0
    p.append(txn_batch(7, 0, 0, b"a", b"b"))  # 1-2: producer 7 opens
    p.append(txn_batch(8, 0, 0, b"c"))  # 3: producer 8 opens
    p.flush()
    assert (p.high_watermark, p.last_stable_offset) == (4, 1)
    p.append_marker(7, 0, commit=False)  # 4: 7 aborted
    p.flush()
    assert p.last_stable_offset == 3  # 8 is still open
    p.append_marker(8, 0, commit=True)  # 5
    p.flush()
    assert p.last_stable_offset == p.high_watermark == 6
    aborted = [(a.producer_id, a.first_offset, a.last_offset) for a in p.aborted_transactions(0, 6)]
    assert aborted == [(7, 1, 4)]
    assert p.aborted_transactions(5, 6) == []  # a read that starts past it does not meet it
    p.close()
    again = Partition(str(tmp_path))
    assert again.last_stable_offset == 6
    assert [(a.producer_id, a.first_offset) for a in again.aborted_transactions(0, 6)] == [(7, 1)]


def test_a_marker_fences_older_epochs_and_producers_cannot_write_markers(tmp_path):
    p = Partition(str(tmp_path))
    p.append(txn_batch(7, 0, 0, b"a"))
    p.append_marker(7, 1, commit=False)  # the coordinator aborted with a bumped epoch
    with pytest.raises(Exception, match="epoch"):
        p.append(txn_batch(7, 0, 1, b"zombie"))
    with pytest.raises(InvalidRecordError, match="control"):
        p.append(marker_batch(7, 1, True, 1))
    assert p.log_end_offset == 2  # nothing refused was written


def test_compaction_drops_aborted_records_keeps_markers_and_leaves_open_transactions(tmp_path):
    from freshet.format.record_batch import decode_records, iter_batches
    from freshet.log import LogConfig
    from freshet.log.cleaner import compact

    p = Partition(str(tmp_path), LogConfig(cleanup_policy="compact"))
    p.append(encode_batch([(b"k", b"v1", 1)]))  # 0
    p.append(encode_batch([(b"k", b"v2", 1)], producer_id=7, producer_epoch=0, base_sequence=0,
                          attributes=TRANSACTIONAL_FLAG))  # 1: aborted below
    p.append_marker(7, 0, commit=False)  # 2
    p.append(encode_batch([(b"j", b"w1", 1), (b"j", b"w2", 1)], producer_id=8, producer_epoch=0, base_sequence=0,
                          attributes=TRANSACTIONAL_FLAG))  # 3-4: committed below
    p.append_marker(8, 0, commit=True)  # 5
    p.append(encode_batch([(b"k", b"open", 1)], producer_id=9, producer_epoch=0, base_sequence=0,
                          attributes=TRANSACTIONAL_FLAG))  # 6: still open
    p.roll()
    p.append(encode_batch([(b"z", b"active", 1)]))
    p.flush()
    compact(p)
    kept = {}
    for segment in p.segments[:-1]:
        for header, batch in iter_batches(segment.read(0, segment.size)):
            for r in decode_records(batch):
                kept[r.offset] = (r.value, header.producer_id, header.is_control)
    assert kept[0][0] == b"v1"  # the aborted v2 never counted as k's newest value
    assert 1 not in kept  # the aborted record is gone
    assert kept[2][2] and kept[5][2]  # both markers kept
    assert 3 not in kept and kept[4] == (b"w2", 8, False)  # compacted, still producer 8's
    assert kept[6][0] == b"open"  # an open transaction is not touched
    p.close()
    again = Partition(str(tmp_path), LogConfig(cleanup_policy="compact"))
    assert again.last_stable_offset == 6  # the open transaction still holds readers back
