"""InitProducerId of a producer that bumps its own epoch (KIP-360: librdkafka sends its producer id and epoch after
an abortable error) is retried when its answer is lost: the coordinator was killed after the bump was in the ISR of
``__transaction_state``, or the request timed out on a loaded machine. Kafka answers the retry with the bumped epoch
(TransactionMetadata.prepareIncrementProducerEpoch: the expected epoch is the lastProducerEpoch it keeps in the
log); Freshet answered PRODUCER_FENCED, fatal to the client. A new producer's InitProducerId, or the coordinator's
own fencing, still fences every earlier epoch."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from freshet.broker.transactions import MAX_EPOCH, TransactionCoordinator, TransactionError

from .test_fetch_wakeups import _run as run  # a broker in-process, the scenario run against it


async def fenced(coordinator, producer_id: int, epoch: int) -> ErrorCode:
    with pytest.raises(TransactionError) as refused:
        await coordinator.init_producer_id("tx", 60_000, producer_id, epoch)
    return refused.value.error_code


def test_the_retry_of_a_written_epoch_bump_gets_the_bumped_epoch_at_the_next_coordinator_too(tmp_path):
    async def scenario(broker):
        txn = broker.transactions
        pid, epoch = await txn.init_producer_id("tx", 60_000, -1, -1)
        assert await txn.init_producer_id("tx", 60_000, pid, epoch) == (pid, epoch + 1)  # its answer lost
        assert await txn.init_producer_id("tx", 60_000, pid, epoch) == (pid, epoch + 1)  # the retry: no new bump
        successor = TransactionCoordinator(broker)  # what the next coordinator reads from __transaction_state
        assert await successor.init_producer_id("tx", 60_000, pid, epoch) == (pid, epoch + 1)
        assert await successor.init_producer_id("tx", 60_000, pid, epoch + 1) == (pid, epoch + 2)
        assert await fenced(successor, pid, epoch) == ErrorCode.producer_fenced  # two bumps back: a zombie

    run(tmp_path, scenario)


def test_a_new_producer_or_the_coordinator_fencing_leaves_no_bump_to_retry(tmp_path):
    async def scenario(broker):
        txn = broker.transactions
        pid, epoch = await txn.init_producer_id("tx", 60_000, -1, -1)
        await txn.init_producer_id("tx", 60_000, pid, epoch)
        assert await txn.init_producer_id("tx", 60_000, -1, -1) == (pid, epoch + 2)  # a new producer
        assert await fenced(txn, pid, epoch + 1) == ErrorCode.producer_fenced
        await txn.add_partitions("tx", pid, epoch + 2, [], ErrorCode.producer_fenced)
        await txn.add_offsets("tx", pid, epoch + 2, "g", ErrorCode.producer_fenced)  # a transaction open
        await txn._abort_with_fencing(txn.transactions["tx"], "a test")  # as on transaction.timeout.ms
        assert await fenced(txn, pid, epoch + 2) == ErrorCode.producer_fenced

    run(tmp_path, scenario)


def test_the_retry_of_a_bump_that_exhausted_the_epochs_gets_the_new_producer_id(tmp_path):
    async def scenario(broker):
        txn = broker.transactions
        pid, _ = await txn.init_producer_id("tx", 60_000, -1, -1)
        txn.transactions["tx"].producer_epoch = MAX_EPOCH - 1
        new_pid, epoch = await txn.init_producer_id("tx", 60_000, pid, MAX_EPOCH - 1)
        assert new_pid != pid and epoch == 0
        assert await txn.init_producer_id("tx", 60_000, pid, MAX_EPOCH - 1) == (new_pid, 0)

    run(tmp_path, scenario)
