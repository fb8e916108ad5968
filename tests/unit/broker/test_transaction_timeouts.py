"""transaction.timeout.ms on deadlines: the coordinator aborts an open transaction when its timeout comes, retries an
abort the state log refused, and an idle coordinator is not woken (it checked every 0.5 s: broker CPU for nothing,
issue 50)."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from freshet.broker.config import BrokerConfig
from freshet.broker.server import Broker
from freshet.broker.transactions import COMPLETE_ABORT, COMPLETE_COMMIT, ONGOING, TransactionError

from .test_reaper import _until

FENCED = ErrorCode.invalid_producer_epoch


def run(tmp_path, scenario) -> None:
    async def main() -> None:
        broker = Broker(BrokerConfig(data_dir=str(tmp_path / "broker"), host="127.0.0.1", port=0))
        await broker.start()
        try:
            broker.registry.create("t", 1)
            await scenario(broker, broker.transactions)
        finally:
            await broker.stop()

    asyncio.run(main())


async def _open(txn, tid: str, timeout_ms: int) -> tuple[int, int]:
    pid, epoch = await txn.init_producer_id(tid, timeout_ms, -1, -1)
    await txn.add_partitions(tid, pid, epoch, [("t", 0)], FENCED)
    assert txn.transactions[tid].state == ONGOING
    return pid, epoch


def test_an_idle_coordinator_waits_and_an_open_transaction_is_aborted_at_its_timeout(tmp_path):
    async def scenario(broker, txn):
        await _until(lambda: txn._timeouts.checks >= 1, "the first check")
        idle = txn._timeouts.checks
        for _ in range(50):  # nothing open: no timer, no further check
            await asyncio.sleep(0)
        assert txn._timeouts.checks == idle
        pid, epoch = await _open(txn, "slow", 300)
        kept_pid, kept_epoch = await _open(txn, "quick", 60_000)
        await _until(lambda: txn.transactions["slow"].state == COMPLETE_ABORT, "the timeout's abort")
        assert txn.transactions["slow"].producer_epoch == epoch + 1  # fenced: the producer that opened it is done
        assert txn.transactions["quick"].state == ONGOING  # its own timeout is a minute away
        await txn.end_transaction("quick", kept_pid, kept_epoch, True, FENCED)
        assert txn.transactions["quick"].state == COMPLETE_COMMIT

    run(tmp_path, scenario)


def test_a_timeout_abort_the_state_log_refused_is_tried_again(tmp_path):
    async def scenario(broker, txn):
        refusals = []
        write = txn._write

        async def refusing_once(meta):
            if meta.state != ONGOING and not refusals:
                refusals.append(meta.state)
                raise TransactionError(ErrorCode.coordinator_not_available, "refused by the test")
            await write(meta)

        _, epoch = await _open(txn, "tx", 200)
        txn._write = refusing_once
        await _until(lambda: txn.transactions["tx"].state == COMPLETE_ABORT, "the abort, tried again")
        assert refusals == ["PrepareAbort"]
        assert txn.transactions["tx"].producer_epoch == epoch + 1

    run(tmp_path, scenario)
