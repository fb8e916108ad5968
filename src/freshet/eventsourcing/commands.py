"""Sending commands and reading their answers.

A command is appended to ``{app}.commands`` in its aggregate's partition; the processor that owns the
partition decides it and writes the answer to ``{app}.replies`` in the same transaction as the events.
Answers travel in one record per partition and processor batch (``{"answers": [...]}``). An answer
carries the events' partition and the offset of the last one: hand it to a projection's
``wait_for`` to read your own write.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from freshet.client import consumer_config, producer_config
from freshet.client.produce import produce_waiting
from freshet.client.reading import drain

from .aggregate import Application
from .events import Command, Event, SchemaError
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
    """Sends commands to an application and waits for their answers."""

    def __init__(self, app: Application, bootstrap: str) -> None:
        self.app = app
        self.producer = Producer(producer_config(bootstrap, {"log_level": 0, "linger.ms": 2,
                                                             "queue.buffering.max.messages": 1_000_000}))
        self.replies = Consumer(consumer_config(bootstrap, overrides={"isolation.level": "read_committed",
                                                                      "log_level": 0}))
        # answers to commands sent from now on: start each replies partition at its current end
        starts = [TopicPartition(app.replies_topic, p, self.replies.get_watermark_offsets(
            TopicPartition(app.replies_topic, p), 10)[1]) for p in range(app.partitions)]
        self.replies.assign(starts)
        self._answers: dict[str, Answer] = {}
        self._waiting: set[str] = set()

    def close(self) -> None:
        self.producer.flush(30)
        self.replies.close()

    def __enter__(self) -> CommandClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # sending ---------------------------------------------------------------------------------------
    def send(self, stream: str, command: Command, expected_version: int | None = None) -> str:
        """Append a command for aggregate ``stream`` (``type/id``); returns its id. Does not wait."""
        self.app.new_aggregate(stream)
        type_name, data = self.app.codec.command_data(command)
        return self._send(stream, type_name, data, expected_version, None)

    def send_raw(self, stream: str, type_name: str, data: dict, expected_version: int | None = None) -> str:
        """A command given by name and fields (the CLI's way); checked against the registered classes."""
        self.app.new_aggregate(stream)
        self.app.codec.command_from(type_name, data)
        return self._send(stream, type_name, data, expected_version, None)

    def append(self, stream: str, events: list[Event], expected_version: int) -> str:
        """Append events directly, if the aggregate is still at ``expected_version`` (else the answer is a
        conflict). Serialized with the aggregate's commands by the same processor."""
        self.app.new_aggregate(stream)
        payload = []
        for event in events:
            if self.app.codec.events.get(type(event).__name__) is not type(event):
                raise SchemaError(f"event class {type(event).__name__} is not registered")
            payload.append({"type": type(event).__name__, "data": vars(event).copy()})
        return self._send(stream, "", {}, expected_version, payload)

    def _send(self, stream: str, type_name: str, data: dict, expected_version: int | None,
              append: list[dict] | None) -> str:
        command_id = uuid.uuid4().hex
        value = encode_command(command_id, type_name, data, expected_version, append)
        produce_waiting(self.producer, self.app.commands_topic, value, stream.encode(),
                        partition=self.app.partition_of(stream))
        self._waiting.add(command_id)
        return command_id

    # answers ---------------------------------------------------------------------------------------
    def answers(self, ids: list[str], timeout: float = 30.0) -> dict[str, Answer]:
        """Wait for the answers to ``ids``."""
        self.producer.flush(timeout)
        wanted = set(ids)
        deadline = time.monotonic() + timeout
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
