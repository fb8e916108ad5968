"""Idempotent-producer state of one partition: the last batches of each producer id.

Kafka's rules (ProducerStateManager): a batch whose sequence range matches one of the last
five batches of the same producer id and epoch is a duplicate (a retry) and is answered with
the offset it was first written at; otherwise its first sequence must follow the last one
(modulo 2^31), or it opens a new epoch at sequence 0. The state is rebuilt from the batch
headers of the log when a partition opens, so a producer carries on across a restart.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from freshet.format.record_batch import BatchHeader

from .errors import InvalidProducerEpochError, OutOfOrderSequenceError

BATCHES_KEPT = 5
SEQUENCE_SPAN = 1 << 31


@dataclass(slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


class ProducerStateManager:
    """Sequence checks and duplicate detection for every producer id writing one partition."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, header: BatchHeader, pending: dict[int, ProducerEntry] | None = None) -> BatchMetadata | None:
        """Validate a batch before it is written.

        Returns the metadata of the original batch when this one is a duplicate, None when
        it may be appended. Raises OutOfOrderSequenceError or InvalidProducerEpochError.
        ``pending`` holds entries staged by earlier batches of the same request.
        """
        pid = header.producer_id
        if pid < 0 or header.base_sequence < 0:
            return None
        entry = (pending or {}).get(pid) or self.producers.get(pid)
        if entry is None:
            return None  # unknown producer: any sequence starts it (as Kafka after retention)
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {pid} epoch {header.producer_epoch} is older than {entry.epoch}"
            )
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {pid} opened epoch {header.producer_epoch} at sequence "
                    f"{header.base_sequence}, not 0"
                )
            return None
        for batch in entry.batches:
            if batch.first_sequence == header.base_sequence and batch.last_sequence == header.last_sequence:
                return batch
        expected = (entry.last_sequence + 1) % SEQUENCE_SPAN
        if header.base_sequence != expected:
            raise OutOfOrderSequenceError(
                f"producer {pid} epoch {header.producer_epoch}: sequence {header.base_sequence}, "
                f"expected {expected}"
            )
        return None

    def stage(self, header: BatchHeader, first_offset: int, pending: dict[int, ProducerEntry]) -> None:
        """Record an accepted batch in ``pending`` (committed by ``commit``)."""
        pid = header.producer_id
        if pid < 0 or header.base_sequence < 0:
            return
        current = pending.get(pid) or self.producers.get(pid)
        if current is None or header.producer_epoch != current.epoch:
            entry = ProducerEntry(header.producer_epoch)
        else:
            entry = ProducerEntry(current.epoch, deque(current.batches, maxlen=BATCHES_KEPT))
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                header.last_sequence,
                first_offset,
                first_offset + header.last_offset_delta,
                header.max_timestamp,
            )
        )
        pending[pid] = entry

    def commit(self, pending: dict[int, ProducerEntry]) -> None:
        self.producers.update(pending)

    def fence(self, producer_id: int, epoch: int) -> None:
        """A transaction marker of ``epoch``: batches of older epochs of the producer are refused from now on."""
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            self.producers[producer_id] = ProducerEntry(epoch)

    def load(self, header: BatchHeader) -> None:
        """Replay one batch header from the log during recovery."""
        pending: dict[int, ProducerEntry] = {}
        self.stage(header, header.base_offset, pending)
        self.commit(pending)

    def max_producer_id(self) -> int:
        return max(self.producers, default=-1)
