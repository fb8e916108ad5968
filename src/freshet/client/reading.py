"""Reading partitions to their end, as a read_committed consumer sees it (replays, event stores, tests).

"The end" is where the consumer's partition-EOF event says it is: the last stable offset for a
read_committed reader (transaction markers take offsets too, so counting records to the high watermark
would wait forever).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from .errors import ClientError
from .config import consumer_config


def reader(bootstrap: str, overrides: dict | None = None) -> Consumer:
    """A consumer for assign()-style reading: no group offsets used, EOF reported, read_committed.

    ``fetch.wait.max.ms=10``: the end of a partition is known when a fetch comes back empty, and the broker
    holds an empty fetch for up to this long (librdkafka's default, 500 ms, made every read-to-the-end
    take half a second at least)."""
    return Consumer(consumer_config(bootstrap, f"freshet-reader-{uuid.uuid4().hex[:8]}", {
        "enable.partition.eof": True, "isolation.level": "read_committed", "log_level": 0,
        "fetch.wait.max.ms": 10, **(overrides or {})}))


def drain(consumer: Consumer, max_messages: int, timeout_s: float) -> list[Message]:
    """Up to ``max_messages`` messages: wait up to ``timeout_s`` for the first, then take what is already
    fetched without waiting. (``consume(n, timeout)`` alone waits the whole timeout unless n arrive.)"""
    first = consumer.consume(1, timeout_s)
    if not first:
        return first
    return first + consumer.consume(max_messages - 1, 0)


def read_to_end(consumer: Consumer, starts: Iterable[tuple[str, int, int]], handle: Callable[[Message], None],
                timeout_s: float = 120.0) -> dict[tuple[str, int], int]:
    """Assign ``(topic, partition, start offset)`` (start -2: the beginning), call ``handle`` on every record
    in offset order per partition, and return each partition's position once all have reached the end."""
    starts = list(starts)
    assigned = [TopicPartition(t, p, OFFSET_BEGINNING if o < 0 else o) for t, p, o in starts]
    # the partitions' leaders known before the assignment: a partition assigned at a logical offset with no
    # known leader has that offset looked up on a fixed 500 ms retry timer in librdkafka, added to every
    # fresh read (reads from a known offset, as a refresh continues, need no lookup)
    for topic in {t for t, _, o in starts if o < 0}:
        try:
            consumer.list_topics(topic, timeout=min(timeout_s, 10.0))
        except KafkaException:
            pass  # the reading below reports what is wrong
    consumer.assign(assigned)
    ends = {(t, p): max(o, 0) for t, p, o in starts}
    pending = set(ends)
    deadline = time.monotonic() + timeout_s
    while pending:
        if time.monotonic() > deadline:
            raise ClientError(f"reading {sorted(pending)} did not reach the end in {timeout_s:.0f} s")
        for m in drain(consumer, 10_000, 0.2):
            err = m.error()
            if err is None:
                handle(m)
            elif err.code() == KafkaError._PARTITION_EOF:
                ends[(m.topic(), m.partition())] = m.offset()
                pending.discard((m.topic(), m.partition()))
            else:
                raise ClientError(f"reading {m.topic()}: {err.str()}")
    # the consumer's position: past the last record handled, or where it found the end (records that
    # arrived after a partition's end while others were still being read included)
    for tp in consumer.position(assigned):
        if tp.offset >= 0:
            ends[(tp.topic, tp.partition)] = max(ends[(tp.topic, tp.partition)], tp.offset)
    return ends


def read_committed_ranges(bootstrap: str, starts: dict[tuple[str, int], int]):
    """A bulk read with no Message object per record: every committed record of each ``(topic, partition)``
    from its start offset up to where the partition ends now (its last stable offset), as chunks of
    ``freshet.client.columnar.Records`` in offset order per partition. Returns (chunks, ends), or None when
    the columnar reader cannot serve this client's settings (security, or no C decoder built): the caller
    reads with librdkafka instead."""
    from .columnar import ColumnarUnavailable, RangeReader, ReadError, ReadRange, covers
    from .config import security_config

    options = {"isolation.level": "read_committed", **security_config()}
    if covers(options) is not None:
        return None
    try:
        ends = RangeReader(bootstrap, [], None, options=options).end_offsets(list(starts))
    except (ReadError, ColumnarUnavailable) as exc:
        raise ClientError(f"reading {sorted(starts)}: {exc}") from None
    ends = {tp: max(end, starts[tp]) for tp, end in ends.items()}
    reader = RangeReader(bootstrap, [ReadRange(t, p, start, ends[(t, p)]) for (t, p), start in starts.items()],
                         None, options=options)

    def chunks():
        try:
            yield from reader.records()
        except ReadError as exc:
            raise ClientError(f"reading {sorted(starts)}: {exc}") from None

    return chunks(), ends
