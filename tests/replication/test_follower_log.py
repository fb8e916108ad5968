"""Partition.append_as_follower and truncate_to, the log side of a follower."""

import os

import pytest

from freshet.format.record_batch import encode_batch, iter_batches
from freshet.log import InvalidRecordError, Partition


def leader_batch(base_offset: int, *values: bytes, epoch: int = 0) -> bytes:
    data = bytearray(encode_batch([(b"k", v, 1000) for v in values], base_offset=base_offset))
    data[12:16] = epoch.to_bytes(4, "big")  # partitionLeaderEpoch, outside the CRC
    return bytes(data)


def test_a_follower_takes_the_leaders_batches_as_they_are_gaps_included(tmp_path):
    follower = Partition(str(tmp_path / "p"))
    follower.append_as_follower(leader_batch(0, b"a", b"b") + leader_batch(2, b"c", epoch=3))
    # a compacted leader's log: offsets 3-6 are gone, the next batch starts at 7
    assert follower.append_as_follower(leader_batch(7, b"h", epoch=3)) == 8
    stored = follower.read(0, 1 << 20, upper=follower.log_end_offset)
    assert [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h, _ in iter_batches(stored)] == [
        (0, 1, 0), (2, 2, 3), (7, 7, 3)]
    assert follower.leader_epochs.entries == [(0, 0), (3, 2)]
    with pytest.raises(InvalidRecordError, match="overlaps"):
        follower.append_as_follower(leader_batch(6, b"x", b"y", b"z", epoch=3))  # 6-8: across the end
    assert follower.log_end_offset == 8  # refused: nothing written
    # what it already has is skipped (fetched again after a reconnect)
    assert follower.append_as_follower(leader_batch(7, b"h", epoch=3) + leader_batch(8, b"i", epoch=3)) == 9


def test_truncation_cuts_whole_batches_and_rebuilds_producer_state_and_epochs(tmp_path):
    follower = Partition(str(tmp_path / "p"))
    idempotent = bytearray(encode_batch([(b"k", b"v", 1000)] * 2, base_offset=0, producer_id=9, producer_epoch=0,
                                        base_sequence=0))
    follower.append_as_follower(bytes(idempotent) + leader_batch(2, b"c", epoch=1))
    later = bytearray(encode_batch([(b"k", b"w", 1000)], base_offset=3, producer_id=9, producer_epoch=0,
                                   base_sequence=2))
    later[12:16] = (2).to_bytes(4, "big")
    follower.append_as_follower(bytes(later))
    assert follower.producer_state.producers[9].last_sequence == 2
    follower.truncate_to(2)
    assert follower.log_end_offset == 2 and follower.leader_epochs.entries == [(0, 0)]
    assert follower.producer_state.producers[9].last_sequence == 1
    reopened = Partition(follower.directory)
    assert reopened.log_end_offset == 2 and reopened.leader_epochs.entries == [(0, 0)]


def test_a_reopened_log_forgets_epochs_that_start_past_its_end(tmp_path):
    """The epoch cache is fsync'd before the batches that begin an epoch are; a crash between the two leaves an
    epoch starting past the recovered log end. As Kafka on load (truncateFromEnd(logEndOffset)) it is dropped."""
    follower = Partition(str(tmp_path / "p"))
    follower.append_as_follower(leader_batch(0, b"a", b"b", epoch=1))
    follower.flush()
    segment_file = follower.active_segment.path
    size = os.path.getsize(segment_file)
    follower.append_as_follower(leader_batch(2, b"c", epoch=4))
    assert follower.leader_epochs.entries == [(1, 0), (4, 2)]
    # the machine crashes: the second batch never reached the disk, the checkpoint did
    os.truncate(segment_file, size)
    reopened = Partition(follower.directory)
    assert reopened.log_end_offset == 2
    assert reopened.leader_epochs.entries == [(1, 0)]
    assert Partition(follower.directory).leader_epochs.entries == [(1, 0)]  # and so written
