"""The topics a broker holds: creation, deletion, partitions, configs, and where they live.

Layout under the data directory::

    topics/<topic>/topic.json        name, topic id, partition count, config overrides
    topics/<topic>/<partition>/      that partition's segments
    producer-ids                     the next producer id block (never reused)
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from freshet.log import Partition

from ..durability import write_json_atomically
from .topic_config import InvalidConfigError, log_config, validate_configs

log = logging.getLogger(__name__)

TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
MAX_PARTITIONS = 10000


class TopicError(Exception):
    def __init__(self, error_code: int, message: str):
        super().__init__(message)
        self.error_code = error_code


def check_topic_name(name: str | None) -> None:
    if not name or not TOPIC_NAME.match(name) or name in (".", ".."):
        raise TopicError(
            ErrorCode.invalid_topic_exception,
            f"invalid topic name {name!r}: 1-249 characters of a-z A-Z 0-9 . _ -",
        )


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    directory: str
    configs: dict[str, str] = field(default_factory=dict)
    partitions: list[Partition] = field(default_factory=list)
    internal: bool = False
    defaults: dict[str, str] = field(default_factory=dict)  # the broker's dynamic topic defaults (shared)

    def save(self) -> None:
        write_json_atomically(
            os.path.join(self.directory, "topic.json"),
            {"name": self.name, "id": str(self.topic_id), "partitions": len(self.partitions),
             "configs": self.configs},
        )

    def open_partition(self, index: int) -> Partition:
        return Partition(os.path.join(self.directory, str(index)), log_config(self.configs, self.defaults))


class ProducerIdBlock:
    """Producer ids handed out in blocks whose end is written down first: never reused after a crash."""

    BLOCK = 1000

    def __init__(self, path: str, floor: int = 0) -> None:
        self.path = path
        start = floor
        if os.path.exists(path):
            with open(path) as f:
                start = max(start, int(f.read().strip() or 0))
        self.next_id = start
        self.block_end = start
        self._reserve()

    def _reserve(self) -> None:
        self.block_end = self.next_id + self.BLOCK
        with open(self.path + ".tmp", "w") as f:
            f.write(str(self.block_end))
            f.flush()
            os.fsync(f.fileno())
        os.replace(self.path + ".tmp", self.path)

    def allocate(self) -> int:
        if self.next_id >= self.block_end:
            self._reserve()
        pid = self.next_id
        self.next_id += 1
        return pid


class TopicRegistry:
    def __init__(self, data_dir: str, defaults: dict[str, str] | None = None) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.topics_dir = os.path.join(self.data_dir, "topics")
        os.makedirs(self.topics_dir, exist_ok=True)
        self.defaults: dict[str, str] = dict(defaults or {})  # topic config -> the broker's dynamic default
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        self._load()
        max_pid = max(
            (p.producer_state.max_producer_id() for t in self.topics.values() for p in t.partitions),
            default=-1,
        )
        self.producer_ids = ProducerIdBlock(os.path.join(self.data_dir, "producer-ids"), max_pid + 1)

    def _load(self) -> None:
        for name in sorted(os.listdir(self.topics_dir)):
            meta_path = os.path.join(self.topics_dir, name, "topic.json")
            if not os.path.exists(meta_path):
                continue
            with open(meta_path) as f:
                meta = json.load(f)
            topic = Topic(meta["name"], uuid.UUID(meta["id"]), os.path.join(self.topics_dir, name), meta["configs"],
                          defaults=self.defaults)
            topic.partitions = [topic.open_partition(i) for i in range(meta["partitions"])]
            cut = sum(p.recovered_bytes_cut for p in topic.partitions)
            if cut:
                log.warning("topic %s: recovery cut %d bytes of torn tail", name, cut)
            self.topics[topic.name] = topic
            self.by_id[topic.topic_id] = topic

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def partition(self, name: str, index: int) -> Partition | None:
        topic = self.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def validate_create(self, name: str, partitions: int, replication_factor: int, configs: dict) -> dict[str, str]:
        check_topic_name(name)
        if name in self.topics:
            raise TopicError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        if partitions == -1:
            partitions = 1
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise TopicError(ErrorCode.invalid_partitions, f"partitions must be 1..{MAX_PARTITIONS}, got {partitions}")
        if replication_factor not in (-1, 1):
            raise TopicError(
                ErrorCode.invalid_replication_factor,
                f"replication factor {replication_factor} is larger than the 1 broker available",
            )
        try:
            return validate_configs(configs)
        except InvalidConfigError as exc:
            raise TopicError(ErrorCode.invalid_config, str(exc)) from None

    def create(self, name: str, partitions: int = 1, replication_factor: int = -1,
               configs: dict | None = None, topic_id: uuid.UUID | None = None) -> Topic:
        """``topic_id``: the cluster's id for the topic (a broker of a cluster creates its replicas' topics with
        the controller's id); a new one by default."""
        overrides = self.validate_create(name, partitions, replication_factor, configs or {})
        partitions = 1 if partitions == -1 else partitions
        directory = os.path.join(self.topics_dir, name)
        if os.path.exists(directory):  # debris of an interrupted create or delete
            shutil.rmtree(directory)
        os.makedirs(directory)
        topic = Topic(name, topic_id or uuid.uuid4(), directory, overrides, defaults=self.defaults)
        topic.partitions = [topic.open_partition(i) for i in range(partitions)]
        topic.save()
        self.topics[name] = topic
        self.by_id[topic.topic_id] = topic
        log.info("created topic %s with %d partitions %s", name, partitions, overrides)
        return topic

    def internal_topic(self, name: str, configs: dict[str, str]) -> Topic:
        """The broker's own one-partition topic ``name`` (committed offsets, transaction state), created on
        first use; clients may read it but not write or delete it."""
        topic = self.topics.get(name) or self.create(name, 1, -1, configs)
        topic.internal = True
        return topic

    def delete(self, name: str) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        del self.topics[name]
        self.by_id.pop(topic.topic_id, None)
        for p in topic.partitions:
            p.close()
        trash = os.path.join(self.data_dir, "deleted", f"{name}-{topic.topic_id.hex}")
        os.makedirs(os.path.dirname(trash), exist_ok=True)
        os.replace(topic.directory, trash)  # atomic: a crash now leaves the topic gone
        shutil.rmtree(trash, ignore_errors=True)
        log.info("deleted topic %s", name)

    def alter_configs(self, name: str, overrides: dict[str, str], validate_only: bool = False) -> None:
        """Replace ``name``'s config overrides (validated first; nothing changes on a bad one), persist them and
        apply them to its partitions at once (segment size, max.message.bytes...; the cleaner reads retention
        and cleanup.policy on its next pass)."""
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        if topic.internal:
            raise TopicError(ErrorCode.invalid_config, f"{name} is an internal topic: its configs are the broker's")
        try:
            normalized = validate_configs(dict(overrides))
        except InvalidConfigError as exc:
            raise TopicError(ErrorCode.invalid_config, str(exc)) from None
        if validate_only:
            return
        topic.configs = normalized
        topic.save()
        config = log_config(normalized, self.defaults)
        for partition in topic.partitions:
            partition.config = config

    def set_defaults(self, defaults: dict[str, str]) -> None:
        """New dynamic topic defaults from the broker's configs, applied at once to every topic that does not
        override them."""
        self.defaults.clear()
        self.defaults.update(defaults)
        for topic in self.topics.values():
            config = log_config(topic.configs, self.defaults)
            for partition in topic.partitions:
                partition.config = config

    def add_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        if count <= len(topic.partitions):
            raise TopicError(
                ErrorCode.invalid_partitions,
                f"topic {name!r} has {len(topic.partitions)} partitions; the new count must be larger, got {count}",
            )
        if count > MAX_PARTITIONS:
            raise TopicError(ErrorCode.invalid_partitions, f"at most {MAX_PARTITIONS} partitions")
        if validate_only:
            return
        for i in range(len(topic.partitions), count):
            topic.partitions.append(topic.open_partition(i))
        topic.save()

    def close(self) -> None:
        for topic in self.topics.values():
            for p in topic.partitions:
                p.close()
