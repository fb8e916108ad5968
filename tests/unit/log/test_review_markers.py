"""Review finding: a transaction marker of an older producer epoch. Kafka's ProducerAppendInfo.appendEndTxnMarker
checks the marker's epoch (checkProducerEpoch): a coordinator's marker older than the producer's current epoch is
refused (InvalidProducerEpochException), so a late COMMIT or ABORT of a fenced epoch cannot end the transaction
the producer's new epoch has open."""

import pytest

from freshet.format.record_batch import TRANSACTIONAL_FLAG, encode_batch
from freshet.log import Partition


def test_a_marker_of_an_older_producer_epoch_leaves_the_open_transaction_alone(tmp_path):
    p = Partition(str(tmp_path))
    p.append(encode_batch([(b"k", b"new-epoch", 1)], producer_id=7, producer_epoch=1, base_sequence=0,
                          attributes=TRANSACTIONAL_FLAG))  # 0: epoch 1's transaction, open
    p.flush()
    assert p.last_stable_offset == 0
    # a deposed coordinator's (or a delayed) ABORT of the fenced epoch 0
    with pytest.raises(Exception, match="epoch"):
        p.append_marker(7, 0, commit=False)
    p.flush()
    assert p.log_end_offset == 1 and p.last_stable_offset == 0  # still open, nothing written
    assert p.aborted_transactions(0, 1) == []  # a read_committed reader must not skip epoch 1's record as aborted
