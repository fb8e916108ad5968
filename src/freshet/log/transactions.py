"""What a partition knows of transactions: which producers have one open here (from its first offset),
which were aborted (the aborted-transaction index), and so the last stable offset.

Transactional batches carry the producer id; a transaction ends in a partition with a control batch
(a COMMIT or ABORT marker, written by the coordinator). Everything here is rebuilt from the log's
batch headers and markers when a partition opens, as the indexes are.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from freshet.format.control import ABORT
from freshet.format.record_batch import BatchHeader


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int
    last_offset: int  # the offset of its ABORT marker


class TransactionIndex:
    def __init__(self) -> None:
        self.open: dict[int, int] = {}  # producer id -> first offset of its open transaction here
        self.aborted: list[AbortedTransaction] = []  # by last offset

    def batch(self, header: BatchHeader, control_type: int | None = None) -> None:
        """Account one batch as written (or replayed) at ``header.base_offset``."""
        if not header.is_transactional:
            return
        pid = header.producer_id
        if not header.is_control:
            self.open.setdefault(pid, header.base_offset)
            return
        first = self.open.pop(pid, None)
        if first is not None and control_type == ABORT:
            self.aborted.append(AbortedTransaction(pid, first, header.base_offset))

    def last_stable_offset(self, high_watermark: int) -> int:
        """The first offset of the oldest open transaction, or the high watermark when none is open
        (or every open one began above it)."""
        return min(min(self.open.values(), default=high_watermark), high_watermark)

    def aborted_between(self, start: int, end: int) -> list[AbortedTransaction]:
        """Aborted transactions a read of [start, end) may meet (their ranges overlap it)."""
        i = bisect_left(self.aborted, start, key=lambda a: a.last_offset)  # no list built on each fetch
        return [a for a in self.aborted[i:] if a.first_offset < end]

    def forget_below(self, log_start_offset: int) -> None:
        """Retention removed everything below ``log_start_offset``: so are the aborted ranges there."""
        self.aborted = [a for a in self.aborted if a.last_offset >= log_start_offset]
