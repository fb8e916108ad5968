"""The command processor: one ordered decision per aggregate, appended exactly once.

Commands are partitioned by aggregate stream, so every command for one aggregate reaches the same
partition and is decided by the one processor that owns it, in order: "never sell the same seat twice"
needs nothing more. The processor keeps the state of its partitions' aggregates in memory (rebuilt from
snapshots and events when a partition is assigned) and, for each batch of commands, in one Kafka
transaction:

1. appends the events each accepted command produced, in the command's partition of ``{app}.events``;
2. appends the keys made for new data subjects, the snapshots due, and every command's answer;
3. commits the commands' input offsets (``send_offsets_to_transaction``).

So a batch is all-or-nothing: after a crash (kill -9 included) the next processor with the same
transactional id fences the old one, the open transaction is aborted, and the commands are decided again
from the same state. No read_committed reader ever sees an event without its answer, or twice.

This object owns that ordering guarantee; nothing else writes to the events topic.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from freshet.client import TRANSACTIONAL_OFFSETS, consumer_config, producer_config
from freshet.client.reading import drain, reader

from .aggregate import Aggregate, Application, Rejected
from .events import SchemaError
from .keys import SubjectKeys
from .store import Snapshot, replay_partitions

log = logging.getLogger(__name__)


@dataclass
class ProcessorStats:
    commands: int = 0
    accepted: int = 0
    rejected: int = 0
    events: int = 0
    transactions: int = 0
    rebuilds: int = 0
    deferred: int = 0  # rounds that ended at a command whose keys could not be read yet (decided later)
    positions: dict[int, int] = field(default_factory=dict)


def encode_command(command_id: str, type_name: str, data: dict, expected_version: int | None = None,
                   append: list[dict] | None = None, keys_at: int | None = None) -> bytes:
    doc: dict = {"id": command_id, "type": type_name, "data": data}
    if expected_version is not None:
        doc["expected_version"] = expected_version
    if append is not None:
        doc["append"] = append
    if keys_at is not None:  # it holds sealed fields: their keys lie below this offset of the keys topic
        doc["keys_at"] = keys_at
    return orjson.dumps(doc)


_LEGAL_INSTANCE_ID = re.compile(r"[a-zA-Z0-9._-]+")


def check_instance_id(instance_id: str | None) -> None:
    """Kafka's rules for a ``group.instance.id`` (a broker refuses the JoinGroup otherwise): not empty, not
    ``.`` or ``..``, at most 249 characters of ASCII letters, digits, ``.``, ``_`` and ``-``."""
    if instance_id is None:
        return
    if not instance_id:
        raise ValueError("the instance id must not be empty")
    if instance_id in (".", ".."):
        raise ValueError(f"the instance id cannot be {instance_id!r}")
    if len(instance_id) > 249:
        raise ValueError(f"the instance id is {len(instance_id)} characters long, at most 249 are allowed")
    if not _LEGAL_INSTANCE_ID.fullmatch(instance_id):
        raise ValueError(f"the instance id {instance_id!r} holds a character other than ASCII letters, digits, "
                         "'.', '_' and '-'")


def processor_consumer_config(app: Application, bootstrap: str, instance_id: str | None = None) -> dict:
    """The consumer of the processors of ``app`` (group ``{app}.processor``). A processor that dies (kill -9)
    holds its partitions until its session times out: 6 s, not librdkafka's 45 s, so a restarted one takes over
    quickly. With ``instance_id`` it is a static member (KIP-345, ``group.instance.id``): a restarted processor
    with the same id takes the dead one's place at its JoinGroup, without waiting out that session; two running
    with the same id fence each other."""
    check_instance_id(instance_id)
    overrides = {"isolation.level": "read_committed", "log_level": 0, "partition.assignment.strategy": "range",
                 "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
    if instance_id is not None:
        overrides["group.instance.id"] = instance_id
    return consumer_config(bootstrap, f"{app.name}.processor", overrides)


class CommandProcessor:
    """Decides the commands of the partitions assigned to it (consumer group ``{app}.processor``)."""

    def __init__(self, app: Application, bootstrap: str, transactional_id: str | None = None,
                 max_batch: int = 2000, use_snapshots: bool = True, keys_wait_s: float = 2.0,
                 instance_id: str | None = None) -> None:
        """``keys_wait_s``: how long one round waits for the keys a command's personal fields were sealed with
        (a transaction left open on the keys topic hides them until it ends); the command is decided in a later
        round, and the loop stays free for ``stop()`` meanwhile. ``instance_id``: the consumer's
        ``group.instance.id`` (static membership, see ``processor_consumer_config``)."""
        check_instance_id(instance_id)
        self.app, self.bootstrap, self.max_batch, self.use_snapshots = app, bootstrap, max_batch, use_snapshots
        self.keys_wait_s = keys_wait_s
        self.stats = ProcessorStats()
        app.announce(bootstrap)
        self.aggregates: dict[int, dict[str, Aggregate]] = {}
        self._stop = threading.Event()
        self.keys = SubjectKeys(bootstrap, app.keys_topic).load()
        self._replayer = reader(bootstrap)
        self.producer = Producer(producer_config(bootstrap, {
            "transactional.id": transactional_id or f"{app.name}.processor", "log_level": 0,
            "linger.ms": 2, "queue.buffering.max.messages": 1_000_000, **TRANSACTIONAL_OFFSETS,
            # processors with ids of their own (several sharing the partitions): one killed -9 holds its open
            # transaction, and read_committed readers of its partitions, until this timeout aborts it
            "transaction.timeout.ms": 20_000}))
        self.producer.init_transactions(60)
        self.consumer = Consumer(processor_consumer_config(app, bootstrap, instance_id))
        self.consumer.subscribe([app.commands_topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)

    # partitions come and go ------------------------------------------------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._load([tp.partition for tp in partitions])

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.aggregates.pop(tp.partition, None)

    def _load(self, partitions: list[int]) -> None:
        """The state of these partitions' aggregates, from snapshots and the events after them."""
        if not partitions:
            return
        loaded = replay_partitions(self.app, self._replayer, self.keys, partitions, self.use_snapshots)
        self.aggregates.update(loaded)
        self.stats.rebuilds += len(partitions)
        log.info("%s: partitions %s hold %d aggregates", self.app.name, partitions,
                 sum(len(a) for a in loaded.values()))

    # the loop --------------------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    def run(self, idle_timeout_s: float | None = None) -> ProcessorStats:
        """Decide commands until ``stop()`` (or, with ``idle_timeout_s``, until no command came for that
        long). Returns the counts."""
        idle_since = time.monotonic()
        try:
            while not self._stop.is_set():
                batch = [m for m in drain(self.consumer, self.max_batch, 0.2) if self._usable(m)]
                if not batch:
                    if idle_timeout_s is not None and time.monotonic() - idle_since > idle_timeout_s:
                        break
                    continue
                idle_since = time.monotonic()
                try:
                    self._decide_batch(batch)
                except KafkaException as exc:
                    error = exc.args[0] if exc.args else None
                    if error is None or not (error.txn_requires_abort() or error.retriable()):
                        raise
                    log.warning("%s: batch aborted (%s); deciding it again", self.app.name, error.str())
                    self._rewind()
        finally:
            self.close()
        return self.stats

    def close(self) -> None:
        for closing in (self.consumer.close, self._replayer.close, self.keys.close):
            try:
                closing()
            except (KafkaException, RuntimeError):
                pass
        self.producer.flush(10)

    def _usable(self, m: Message) -> bool:
        if m.error() is not None:
            log.warning("commands topic: %s", m.error().str())
            return False
        return True

    def _decide_batch(self, batch: list[Message]) -> None:
        self.keys.follow()  # keys forgotten since the last batch are not used for new data
        self.producer.begin_transaction()
        try:
            answers, snapshots, positions, first, undecided = self._decide(batch)
            if undecided:
                self.stats.deferred += 1
                self._decide_later(undecided)
            if not positions:  # the first command waits for its keys: nothing to commit
                self.producer.abort_transaction(30)
                return
            for ref, key in self.keys.take_created():
                self.producer.produce(self.app.keys_topic, key, ref.encode(), partition=0)
            if self.producer.flush(60):  # the events' offsets go into the answers
                raise KafkaException("events not acknowledged within 60 s")
            if None in first.values():  # an event not delivered: the transaction cannot commit
                raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, "an event was not delivered",
                                                txn_requires_abort=True))
            for partition, of_partition in answers.items():
                for answer in of_partition:
                    if answer["offset"] >= 0:  # its last event's index in this batch: now an offset
                        answer["offset"] += first[partition]
                # one record per partition and batch: {"answers": [...]}, keyed by nothing
                self.producer.produce(self.app.replies_topic, orjson.dumps({"answers": of_partition}),
                                      partition=partition)
            for partition, stream, version, state, index in snapshots:
                snap = Snapshot(stream, version, first[partition] + index, state)
                self.producer.produce(self.app.snapshots_topic, snap.encode(), stream.encode(),
                                      partition=partition)
            self.producer.send_offsets_to_transaction(
                [TopicPartition(self.app.commands_topic, p, o) for p, o in positions.items()],
                self.consumer.consumer_group_metadata(), 60)
            self.producer.commit_transaction(60)
        except BaseException:
            self._abandon(batch)
            raise
        self.stats.transactions += 1
        self.stats.positions.update(positions)

    def _abandon(self, batch: list[Message]) -> None:
        """A batch that did not commit: its events never happened. Drop the state it touched (rebuilt from
        the log) and go back to the committed command offsets."""
        self.keys.forget_pending()
        try:
            self.producer.abort_transaction(30)
        except KafkaException:
            pass
        for p in {m.partition() for m in batch}:
            self.aggregates.pop(p, None)

    def _rewind(self) -> None:
        """Back to the committed command offsets (the aborted batch is decided again)."""
        assigned = self.consumer.assignment()
        for tp in self.consumer.committed(assigned, 30):
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))

    def _decide_later(self, undecided: list[Message]) -> None:
        """Fetch these commands again (each of their partitions from its first one): the next round decides
        them, in the same order."""
        earliest: dict[int, int] = {}
        for m in undecided:
            earliest.setdefault(m.partition(), m.offset())
        for partition, offset in earliest.items():
            self.consumer.seek(TopicPartition(self.app.commands_topic, partition, offset))

    def _keys_readable(self, keys_at) -> bool:
        """Whether the keys below ``keys_at`` can be read now, waiting up to ``keys_wait_s`` for them. True
        also when they never can (``keys_at`` past every key record written, open transactions included):
        deciding the command then refuses it."""
        if type(keys_at) is not int or self.keys.read_past(keys_at, self.keys_wait_s):
            return True
        try:
            return self.keys.written_end() < keys_at
        except KafkaException:  # no answer now: asked again in the next round
            return False

    def _decide(self, batch: list[Message]):
        """Decide the commands of the batch in order and produce their events. The events of one partition
        are appended by this processor alone (it holds the partition and its transactional id fences any
        other), so within a transaction they take consecutive offsets: the first one's delivery report
        gives them all, and answers and snapshots carry indexes until then. A command whose keys cannot be
        read yet ends the batch there: it and the commands after it are returned undecided."""
        codec, app = self.app.codec, self.app
        answers: dict[int, list[dict]] = {}
        snapshots: list[tuple[int, str, int, dict, int]] = []
        positions: dict[int, int] = {}
        appended: dict[int, int] = {}  # events produced per partition in this batch
        first: dict[int, int | None] = {}  # partition -> offset of its first event in this batch
        every = app.snapshot_every
        events_topic, produce = app.events_topic, self.producer.produce
        for index, m in enumerate(batch):
            partition = m.partition()
            try:
                doc = orjson.loads(m.value())
                command_id = str(doc["id"])
            except (ValueError, KeyError, TypeError):
                positions[partition] = m.offset() + 1
                self.stats.commands += 1
                log.warning("%s: skipped a record that is not a command at %d/%d", app.name, partition, m.offset())
                continue
            keys_at = doc.get("keys_at")
            if keys_at is not None and not self._keys_readable(keys_at):
                log.info("%s: the keys below %s in %s are not readable yet (an open transaction?): command %s "
                         "waits", app.name, keys_at, app.keys_topic, command_id)
                return answers, snapshots, positions, first, batch[index:]
            positions[partition] = m.offset() + 1
            self.stats.commands += 1
            aggregates = self.aggregates.get(partition)
            if aggregates is None:
                self._load([partition])
                aggregates = self.aggregates[partition]
            stream = m.key().decode() if m.key() else ""
            answer: dict = {"id": command_id, "stream": stream, "partition": partition, "offset": -1}
            answers.setdefault(partition, []).append(answer)
            agg = aggregates.get(stream)
            try:
                if agg is None:
                    agg = app.new_aggregate(stream)
                expected = doc.get("expected_version")
                if expected is not None and expected != agg.version:
                    raise Conflict(f"{stream} is at version {agg.version}, not {expected}")
                if keys_at is not None and (type(keys_at) is not int or self.keys.position < keys_at):
                    raise SchemaError(f"its keys_at {keys_at!r} is not an offset within {app.keys_topic}: the "
                                      f"keys of its personal fields were never written there")
                if "append" in doc:  # a direct append: the events are given
                    events = [codec.open_appended(e, self.keys) for e in doc["append"]]
                else:
                    events = agg.decide(codec.command_from(doc["type"], doc.get("data") or {}, self.keys)) or []
            except Conflict as exc:
                answer.update(status="conflict", reason=str(exc), version=agg.version if agg else 0)
                self.stats.rejected += 1
                continue
            except (Rejected, SchemaError, KeyError, TypeError, ValueError) as exc:
                reason = exc.reason if isinstance(exc, Rejected) else f"{type(exc).__name__}: {exc}"
                answer.update(status="rejected", reason=reason, version=agg.version if agg else 0)
                self.stats.rejected += 1
                events = exc.record if isinstance(exc, Rejected) else []
                if not events:
                    continue
            aggregates[stream] = agg
            key, before = stream.encode(), agg.version
            count = appended.get(partition, 0)
            for event in events:
                version = agg.version + 1
                value = codec.encode_event(stream, version, event, self.keys)
                agg.apply(event)
                agg.version = version
                if count == 0 and partition not in first:
                    produce(events_topic, value, key, partition=partition,
                            on_delivery=lambda err, msg, p=partition: first.__setitem__(
                                p, msg.offset() if err is None else None))
                else:
                    produce(events_topic, value, key, partition=partition)
                count += 1
            appended[partition] = count
            if events:
                answer["offset"] = count - 1
                if agg.version // every != before // every:  # a snapshot as of this command's last event
                    snapshots.append((partition, stream, agg.version, orjson.loads(orjson.dumps(agg.snapshot())),
                                      count - 1))
            self.stats.events += len(events)
            if answer.get("status") == "rejected":  # with the refusal recorded
                answer.update(version=agg.version, events=len(events))
                continue
            answer.update(status="accepted", version=agg.version, events=len(events))
            self.stats.accepted += 1
        return answers, snapshots, positions, first, []


class Conflict(Exception):
    """An expected version that is not the aggregate's."""
