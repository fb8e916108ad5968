"""Reading the event store: an aggregate's history, its state at a version or a time, whole partitions
replayed (from snapshots or from offset 0: the same state either way)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import orjson
from confluent_kafka import Consumer, Message

from freshet.client.reading import read_to_end, reader

from .aggregate import Aggregate, Application
from .events import RecordedEvent
from .keys import SubjectKeys


@dataclass(frozen=True)
class Snapshot:
    stream: str
    version: int
    offset: int  # the events-topic offset of the last event it includes
    state: dict

    def encode(self) -> bytes:
        return orjson.dumps({"version": self.version, "offset": self.offset, "state": self.state})

    @classmethod
    def decode(cls, stream: str, value: bytes) -> Snapshot:
        doc = orjson.loads(value)
        return cls(stream, doc["version"], doc["offset"], doc["state"])


def read_snapshots(consumer: Consumer, app: Application, partitions: list[int]) -> dict[bytes, Snapshot]:
    """The newest snapshot of every stream in these partitions."""
    latest: dict[bytes, Snapshot] = {}

    def keep(m: Message) -> None:
        if m.value() is None:
            latest.pop(m.key(), None)
        else:
            latest[m.key()] = Snapshot.decode(m.key().decode(), m.value())

    read_to_end(consumer, [(app.snapshots_topic, p, -2) for p in partitions], keep)
    return latest


def replay_partitions(app: Application, consumer: Consumer, keys: SubjectKeys | None, partitions: list[int],
                      use_snapshots: bool = True) -> dict[int, dict[str, Aggregate]]:
    """Every aggregate of these events partitions, folded from its snapshot (when ``use_snapshots``) and the
    events after it, by partition. Events a snapshot covers are skipped by their record key alone, never
    decoded. All partitions are read in one pass."""
    aggregates: dict[int, dict[str, Aggregate]] = {p: {} for p in partitions}
    covered: dict[bytes, int] = {}
    if use_snapshots:
        for key, snap in read_snapshots(consumer, app, partitions).items():
            agg = app.new_aggregate(snap.stream)
            agg.restore(snap.state)
            agg.version = snap.version
            aggregates[app.partition_of(snap.stream)][snap.stream] = agg
            covered[key] = snap.offset
    decode = app.codec.decode_stored

    def fold(m: Message) -> None:
        if covered and m.offset() <= covered.get(m.key(), -1):
            return
        stream, version, event = decode(m.value(), keys, False)
        of_partition = aggregates[m.partition()]
        agg = of_partition.get(stream)
        if agg is None:
            agg = of_partition[stream] = app.new_aggregate(stream)
        agg.apply(event)
        agg.version = version

    read_to_end(consumer, [(app.events_topic, p, -2) for p in partitions], fold)
    return aggregates


class EventStore:
    """Read access to an application's events: histories, states, and whole replays."""

    def __init__(self, app: Application, bootstrap: str) -> None:
        self.app, self.bootstrap = app, bootstrap
        self.keys = SubjectKeys(bootstrap, app.keys_topic).load()
        self._consumer = reader(bootstrap)

    def close(self) -> None:
        self._consumer.close()
        self.keys.close()

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def history(self, stream: str) -> list[RecordedEvent]:
        """Every event of one aggregate, oldest first (upcast, personal fields opened or FORGOTTEN)."""
        self.app.new_aggregate(stream)  # a clear error for a stream that names no aggregate
        key, partition = stream.encode(), self.app.partition_of(stream)
        events: list[RecordedEvent] = []

        def keep(m: Message) -> None:
            if m.key() == key:
                events.append(self.app.codec.decode_event(m.value(), self.keys, m.partition(), m.offset(),
                                                          m.timestamp()[1]))

        read_to_end(self._consumer, [(self.app.events_topic, partition, -2)], keep)
        return events

    def state(self, stream: str, version: int | None = None, at_ms: int | None = None) -> Aggregate:
        """The aggregate as of ``version`` (events 1..version), or as of a time (events appended at or
        before ``at_ms``), or now. A version the aggregate has not reached is a ValueError (it is no state
        the aggregate was ever in)."""
        agg = self.app.new_aggregate(stream)
        if version is not None and version < 0:
            raise ValueError(f"version {version}: versions count events, from 0")
        history = self.history(stream)
        last = history[-1].version if history else 0
        if version is not None and version > last:
            raise ValueError(f"{stream} is at version {last}: it has no version {version}")
        for recorded in history:
            if version is not None and recorded.version > version:
                break
            if at_ms is not None and recorded.timestamp_ms > at_ms:
                break
            agg.apply(recorded.event)
            agg.version = recorded.version
        return agg

    def replay(self, use_snapshots: bool = True) -> dict[str, Aggregate]:
        """Every aggregate of the application, replayed partition by partition."""
        out: dict[str, Aggregate] = {}
        for aggregates in replay_partitions(self.app, self._consumer, self.keys, list(range(self.app.partitions)),
                                            use_snapshots).values():
            out.update(aggregates)
        return out

    def events(self, stream: str | None = None) -> Iterator[RecordedEvent]:
        """Every event, partition by partition (or one aggregate's)."""
        if stream is not None:
            yield from self.history(stream)
            return
        for p in range(self.app.partitions):
            messages: list[Message] = []
            read_to_end(self._consumer, [(self.app.events_topic, p, -2)], messages.append)
            for m in messages:
                yield self.app.codec.decode_event(m.value(), self.keys, m.partition(), m.offset(), m.timestamp()[1])
