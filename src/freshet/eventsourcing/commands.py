"""Sending commands and reading their answers.

A command is appended to ``{app}.commands`` in its aggregate's partition; the processor that owns the
partition decides it and writes the answer to ``{app}.replies`` in the same transaction as the events.
Answers travel in one record per partition and processor batch (``{"answers": [...]}``). An answer
carries the events' partition and the offset of the last one: hand it to a projection's
``wait_for`` to read your own write.

A command's personal fields (and those of events appended directly) are sealed here, with the subject's
key, before the command is appended: the commands topic holds no personal data in plain text, and
forgetting the subject makes them unreadable there as in the events. Keys this client makes are appended to
``{app}.keys`` and acknowledged before the commands that use them. Stored form::

    {"id": "9f2c..", "type": "Enroll", "data": {"student_id": "s1", "name": {"key": "s1/4f..", "sealed": ".."}},
     "keys_at": 12, "expected_version": 3}
"""

from __future__ import annotations

import functools
import time
import uuid
from collections import deque
from dataclasses import dataclass

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from freshet.client import ClientError, consumer_config, producer_config
from freshet.client.offsets import watermark_offsets
from freshet.client.produce import flush_delivered, produce_waiting
from freshet.client.reading import drain

from .aggregate import Application
from .events import Command, Event
from .keys import SubjectKeys
from .processor import encode_command


class CommandTimeout(TimeoutError):
    """No answer came in time (is a processor running?)."""


@dataclass(frozen=True)
class Answer:
    id: str
    status: str  # accepted | rejected | conflict
    stream: str
    version: int  # the aggregate's version after the command (or now, when it was not accepted)
    partition: int
    offset: int  # the events-topic offset of the command's last event; -1 when it appended none
    reason: str = ""
    events: int = 0

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"


class CommandClient:
    """Sends commands to an application and waits for their answers. One client keeps one connection for
    any number of commands: ``send``/``send_many`` do not wait, ``answers`` waits for many at once.

    A command whose personal fields are sealed with a key this client has just made is held until the key
    is acknowledged (its offset is the command's ``keys_at``), and the commands sent after it wait behind it,
    so every aggregate's commands reach the log in the order they were sent. Keys of many commands are
    acknowledged together: sending does not wait for them one at a time."""

    def __init__(self, app: Application, bootstrap: str) -> None:
        self.app, self.bootstrap = app, bootstrap
        self.producer = Producer(producer_config(bootstrap, {"log_level": 0, "linger.ms": 2,
                                                             "queue.buffering.max.messages": 1_000_000}))
        self.replies = Consumer(consumer_config(bootstrap, overrides={"isolation.level": "read_committed",
                                                                      "log_level": 0}))
        # answers to commands sent from now on: start each replies partition at its current end
        starts = [TopicPartition(app.replies_topic, p, watermark_offsets(
            self.replies, TopicPartition(app.replies_topic, p), 10)[1]) for p in range(app.partitions)]
        self.replies.assign(starts)
        self._answers: dict[str, Answer] = {}
        self._waiting: set[str] = set()
        self._keys: SubjectKeys | None = None  # read when a first command with personal fields is sent
        self._made: dict[str, int | str | None] = {}  # key this client made -> offset + 1 once acknowledged,
        #                                               the error if it was not, None until then
        self._held: deque[tuple] = deque()  # commands waiting for their keys (and those sent after them)
        self._failed: dict[str, str] = {}  # command id -> why it was not sent

    def close(self, timeout: float = 30.0) -> None:
        """Append every command still held and wait until the broker has them (up to ``timeout``); then close.
        Raises ClientError if any command sent and not yet asked about was not appended (its key or itself
        not acknowledged in time, or refused): none is dropped without a word."""
        try:
            self._release_all(timeout)
            left = flush_delivered(self.producer, self.app.commands_topic, timeout)
            held = len(self._held)
            failed = [self._failed[i] for i in self._waiting if i in self._failed]
            reasons = []
            if held:
                reasons.append(f"{held} held: the keys of their personal fields were not acknowledged by "
                               f"{self.app.keys_topic} in {timeout:g} s")
            if left:
                reasons.append(f"{left} records (commands, keys) not acknowledged in {timeout:g} s: they may or "
                               f"may not be in the log")
            if failed:
                reasons.append(f"{len(failed)} {failed[0]}")
            if reasons:
                raise ClientError("commands were not sent: " + "; ".join(reasons))
        finally:
            self.replies.close()
            if self._keys is not None:
                self._keys.close()

    def __enter__(self) -> CommandClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # sending ---------------------------------------------------------------------------------------
    def send(self, stream: str, command: Command, expected_version: int | None = None) -> str:
        """Append a command for aggregate ``stream`` (``type/id``); returns its id. Does not wait."""
        type_name, data = self.app.codec.command_data(command)  # a registered command: its fields are right
        self.app.new_aggregate(stream)
        return self._send_checked([(stream, type_name, data, expected_version)])[0]

    def send_raw(self, stream: str, type_name: str, data: dict, expected_version: int | None = None) -> str:
        """A command given by name and fields (the CLI's way); checked against the registered classes."""
        return self.send_many([(stream, type_name, data, expected_version)])[0]

    def send_many(self, commands: list[tuple[str, str, dict, int | None]]) -> list[str]:
        """Append many commands, each ``(stream, command name, fields, expected version or None)``, in order;
        returns their ids. Every one is checked before any is sent: one that names no aggregate or command,
        or a field its command does not take, raises and nothing is sent. Does not wait for answers."""
        codec = self.app.codec
        for stream, type_name, data, _ in commands:
            self.app.new_aggregate(stream)
            codec.command_from(type_name, data)  # every field there and known, before anything is sent
        return self._send_checked(commands)

    def _send_checked(self, commands: list[tuple[str, str, dict, int | None]]) -> list[str]:
        """``send_many`` of commands already checked: their fields are sealed as they are, not checked again."""
        codec, ids = self.app.codec, []
        for stream, type_name, data, expected_version in commands:
            personal = codec.command_class(type_name).subject is not None
            keys = self._subject_keys() if personal else None
            ids.append(self._send(stream, type_name, codec.seal_checked(type_name, data, keys), expected_version,
                                  None, personal))
        return ids

    def append(self, stream: str, events: list[Event], expected_version: int) -> str:
        """Append events directly, if the aggregate is still at ``expected_version`` (else the answer is a
        conflict). Serialized with the aggregate's commands by the same processor. Personal fields are
        sealed as a command's are."""
        self.app.new_aggregate(stream)
        personal = any(type(event).subject is not None for event in events)
        keys = self._subject_keys() if personal else None
        payload = [self.app.codec.seal_appended(event, keys) for event in events]
        return self._send(stream, "", {}, expected_version, payload, personal)

    def _subject_keys(self) -> SubjectKeys:
        if self._keys is None:
            self._keys = SubjectKeys(self.bootstrap, self.app.keys_topic, bulk=False).load()
            return self._keys
        self._keys.follow()  # subjects forgotten meanwhile are sealed for with a new key (no waiting)
        if len(self._made) > 10_000 and not self._held:  # keys read back since: the position covers them
            position = self._keys.position
            self._made = {ref: mark for ref, mark in self._made.items()
                          if not isinstance(mark, int) or mark > position}
        return self._keys

    def _send(self, stream: str, type_name: str, data: dict, expected_version: int | None,
              append: list[dict] | None, personal: bool) -> str:
        command_id = uuid.uuid4().hex
        self._waiting.add(command_id)
        refs: list[str] = []
        keys_at = None
        if personal:
            keys = self._keys
            assert keys is not None
            for ref, key in keys.take_created():  # new subjects' keys: appended before the command
                self._made[ref] = None
                produce_waiting(self.producer, self.app.keys_topic, key, ref.encode(), partition=0,
                                on_delivery=functools.partial(self._key_delivered, ref))
            for fields in [data] if append is None else [e["data"] for e in append]:
                refs += [v["key"] for v in fields.values() if type(v) is dict and v.get("key") in self._made]
            keys_at = keys.position  # the keys it had read lie below; those it made, below their offsets
        self._held.append((command_id, stream, type_name, data, expected_version, append, refs, keys_at))
        self.producer.poll(0)
        self._release()
        return command_id

    def _key_delivered(self, ref: str, err, msg) -> None:
        self._made[ref] = msg.offset() + 1 if err is None else err.str()

    def _release(self) -> None:
        """Append the held commands, oldest first, as far as their keys have been acknowledged."""
        held, made = self._held, self._made
        while held:
            command_id, stream, type_name, data, expected_version, append, refs, keys_at = held[0]
            marks = [made[ref] for ref in refs]
            if None in marks:
                return  # a key not acknowledged yet: this command and those after it wait
            held.popleft()
            failed = [mark for mark in marks if isinstance(mark, str)]
            if failed:
                self._failed[command_id] = (f"not sent: the key for its personal fields could not be appended "
                                            f"to {self.app.keys_topic} ({failed[0]})")
                for ref in refs:
                    if isinstance(made[ref], str) and self._keys is not None:
                        self._keys.discard(ref)  # never to seal with again
                continue
            if keys_at is not None:
                keys_at = max([keys_at, *marks])
            value = encode_command(command_id, type_name, data, expected_version, append, keys_at)
            produce_waiting(self.producer, self.app.commands_topic, value, stream.encode(),
                            partition=self.app.partition_of(stream),
                            on_delivery=functools.partial(self._command_delivered, command_id))

    def _command_delivered(self, command_id: str, err, _msg) -> None:
        if err is not None:
            self._failed[command_id] = f"not sent: {self.app.commands_topic} did not take it ({err.str()})"

    def _release_all(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self._release()
        while self._held and time.monotonic() < deadline:
            self.producer.poll(0.05)  # the keys' acknowledgements
            self._release()

    # answers ---------------------------------------------------------------------------------------
    def answers(self, ids: list[str], timeout: float = 30.0) -> dict[str, Answer]:
        """Wait for the answers to ``ids``. A command that could not be sent (its key was not appended)
        raises ClientError."""
        deadline = time.monotonic() + timeout
        self._release_all(timeout)
        flush_delivered(self.producer, self.app.commands_topic, max(0.0, deadline - time.monotonic()))
        not_sent = [self._failed[i] for i in ids if i in self._failed]
        if not_sent:
            self._waiting.difference_update(ids)  # told: close() does not tell again
            raise ClientError(f"{len(not_sent)} of {len(ids)} commands {not_sent[0]}")
        wanted = set(ids)
        while not wanted <= self._answers.keys():
            if time.monotonic() > deadline:
                missing = len(wanted - self._answers.keys())
                raise CommandTimeout(f"{missing} of {len(wanted)} commands not answered in {timeout:.0f} s "
                                     f"(is `freshet es process {self.app.name}` running?)")
            for m in drain(self.replies, 10_000, 0.1):
                if m.error() is None:
                    for doc in orjson.loads(m.value())["answers"]:  # a processor batch's answers, one record
                        if doc["id"] in self._waiting:
                            self._answers[doc["id"]] = Answer(**doc)
        out = {i: self._answers.pop(i) for i in ids}
        self._waiting.difference_update(ids)
        return out

    def answer(self, command_id: str, timeout: float = 30.0) -> Answer:
        return self.answers([command_id], timeout)[command_id]

    def execute(self, stream: str, command: Command, expected_version: int | None = None,
                timeout: float = 30.0) -> Answer:
        """Send one command and wait for its answer."""
        return self.answer(self.send(stream, command, expected_version), timeout)
