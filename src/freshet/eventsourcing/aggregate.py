"""Aggregates in plain Python, and the application that names their topics.

An aggregate decides: ``decide(command)`` looks at the current state and returns the events that follow
(or raises ``Rejected``); ``apply(event)`` folds one event into the state. State is whatever replaying the
events gives, deterministically, so ``apply`` must not look at clocks, randomness or anything but the event
-- nor at personal fields: once a subject is forgotten they read FORGOTTEN, so state built on them would
change on replay (replays do not even open them: they read SEALED). Keep personal data in events and
projections, and ids in state.

Example::

    class Course(Aggregate):
        type_name = "course"

        def __init__(self, id):
            super().__init__(id)
            self.capacity, self.enrolled = 0, []

        def decide(self, command):
            if isinstance(command, Enroll):
                if len(self.enrolled) >= self.capacity:
                    raise Rejected("course is full")
                return [Enrolled(command.student_id)]

        def apply(self, event):
            if isinstance(event, Enrolled):
                self.enrolled.append(event.student_id)
"""

from __future__ import annotations

import time
import zlib
from typing import ClassVar

from .events import Codec, Command, Event


class Rejected(Exception):
    """A command that the current state does not allow; the reason goes back to whoever sent it.

    ``record`` are events to append all the same: a refusal can be a fact worth keeping (a student who asked
    for a full course is on its waiting list)."""

    def __init__(self, reason: str, record: list[Event] | None = None) -> None:
        super().__init__(reason)
        self.reason, self.record = reason, list(record or [])


class Aggregate:
    """One consistency boundary: its commands are decided one at a time, in order."""

    type_name: ClassVar[str] = ""

    def __init__(self, id: str) -> None:
        self.id = id
        self.version = 0  # events applied so far; 0: the aggregate does not exist yet

    @property
    def stream(self) -> str:
        return f"{self.type_name}/{self.id}"

    def decide(self, command: Command) -> list[Event]:
        raise NotImplementedError

    def apply(self, event: Event) -> None:
        raise NotImplementedError

    def snapshot(self) -> dict:
        """The state as JSON-able data (the default: every attribute but id and version)."""
        return {k: v for k, v in vars(self).items() if k not in ("id", "version")}

    def restore(self, state: dict) -> None:
        vars(self).update(state)

    def state(self) -> dict:
        return {"stream": self.stream, "version": self.version, **self.snapshot()}


class Application:
    """An event-sourced application: its aggregates, its codec, and the topics it lives in.

    ``{name}.commands``  commands, partitioned by aggregate stream: one processor decides a partition in order
    ``{name}.events``    the events, in the same partition as the commands that caused them
    ``{name}.replies``   each command's answer (accepted at which offset, or why not)
    ``{name}.snapshots`` the state of an aggregate every ``snapshot_every`` events (compacted)
    ``{name}.keys``      per-subject keys for personal fields (compacted; see keys.py)
    """

    def __init__(self, name: str, aggregates: list[type[Aggregate]], codec: Codec, partitions: int = 4,
                 snapshot_every: int = 100, compacted_segment_ms: int = 60_000) -> None:
        self.name, self.codec, self.partitions, self.snapshot_every = name, codec, partitions, snapshot_every
        self.compacted_segment_ms = compacted_segment_ms  # how soon a forgotten key can be compacted away
        self.aggregates = {cls.type_name: cls for cls in aggregates}
        self.projections: dict[str, type] = {}
        self.commands_topic, self.events_topic = f"{name}.commands", f"{name}.events"
        self.replies_topic, self.snapshots_topic, self.keys_topic = (f"{name}.replies", f"{name}.snapshots",
                                                                     f"{name}.keys")

    def named(self, name: str, **changes) -> Application:
        """The same application under another name (its own topics): two instances side by side."""
        settings = {"partitions": self.partitions, "snapshot_every": self.snapshot_every,
                    "compacted_segment_ms": self.compacted_segment_ms, **changes}
        twin = Application(name, list(self.aggregates.values()), self.codec, **settings)
        twin.projections = dict(self.projections)
        return twin

    def projection(self, cls: type) -> type:
        """Register a projection class (decorator)."""
        self.projections[cls.name] = cls
        return cls

    def partition_of(self, stream: str) -> int:
        return zlib.crc32(stream.encode()) % self.partitions

    def new_aggregate(self, stream: str) -> Aggregate:
        type_name, _, id = stream.partition("/")
        cls = self.aggregates.get(type_name)
        if cls is None or not id:
            known = ", ".join(sorted(self.aggregates))
            raise KeyError(f"{stream!r} names no aggregate of {self.name} (types: {known}; write TYPE/ID)")
        return cls(id)

    def topic_specs(self) -> list[tuple[str, int, dict[str, str]]]:
        compact = {"cleanup.policy": "compact", "segment.ms": str(self.compacted_segment_ms),
                   "delete.retention.ms": "1000"}
        return [(self.commands_topic, self.partitions, {}), (self.events_topic, self.partitions, {}),
                (self.replies_topic, self.partitions, {}), (self.snapshots_topic, self.partitions, compact),
                (self.keys_topic, 1, compact)]

    def create_topics(self, bootstrap: str) -> list[str]:
        """Create whichever of the application's topics are missing; returns the ones created."""
        from freshet.client import TopicAdmin

        admin = TopicAdmin(bootstrap)
        existing = admin.list_topics()
        created = []
        for topic, partitions, configs in self.topic_specs():
            if topic in existing:
                if existing[topic] != partitions:
                    raise ValueError(f"{topic} has {existing[topic]} partitions, {self.name} expects {partitions}")
                continue
            if admin.ensure_topic(topic, partitions, configs, existing):
                created.append(topic)
        self.announce(bootstrap)
        return created

    def topics_not_ready(self, bootstrap: str, admin=None) -> list[str]:
        """The application's topics that cannot be read yet: absent, with fewer partitions than expected, or
        with a partition that has no leader (just created). Empty when all are ready. ``admin``: a
        confluent-kafka AdminClient to ask (one of its own otherwise)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        from freshet.client import ClientError, admin_config
        from freshet.client.errors import kafka_message

        if admin is None:
            admin = AdminClient(admin_config(bootstrap, {"log_level": 0}))
        try:
            metadata = admin.list_topics(timeout=10)
        except KafkaException as exc:
            raise ClientError(f"cannot reach a broker at {bootstrap}: {kafka_message(exc)}") from None
        not_ready = []
        for topic, partitions, _ in self.topic_specs():
            found = metadata.topics.get(topic)
            if (found is None or found.error is not None or len(found.partitions) < partitions
                    or any(p.leader < 0 or p.error is not None for p in found.partitions.values())):
                not_ready.append(topic)
        return not_ready

    def wait_for_topics(self, bootstrap: str, timeout_s: float | None = None, interval_s: float = 0.5) -> None:
        """Return once every topic of the application can be read (``topics_not_ready`` is empty): a reader
        started before the processor has made them waits instead of failing. TimeoutError after
        ``timeout_s`` (None: no limit)."""
        from confluent_kafka.admin import AdminClient

        from freshet.client import admin_config

        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        admin = AdminClient(admin_config(bootstrap, {"log_level": 0}))  # one client for every look
        while not_ready := self.topics_not_ready(bootstrap, admin):
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{self.name}'s topics {', '.join(not_ready)} are not there at {bootstrap} "
                                   f"after {timeout_s:g} s (`freshet es process` makes them)")
            time.sleep(interval_s if deadline is None else max(0.0, min(interval_s, deadline - time.monotonic())))

    def announce(self, bootstrap: str) -> None:
        """List the application in the registry the dashboard reads (``__freshet_applications``)."""
        from freshet.client.application_registry import announce, application_record

        announce(bootstrap, [application_record(self.name, self.events_topic, self.commands_topic,
                                                self.partitions, list(self.aggregates))])
