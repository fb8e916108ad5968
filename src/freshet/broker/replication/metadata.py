"""The partition and broker metadata the control plane gives the replica manager (the interface between the two
halves of issue #46)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Awaitable, Callable


@dataclass(frozen=True)
class PartitionState:
    """One partition as the controller's metadata says."""

    topic: str
    topic_id: uuid.UUID
    index: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int  # -1: offline
    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int  # the broker's PLAINTEXT client port (the followers fetch there)
    rack: str | None
    fenced: bool


# alter_isr(topic, index, leader_epoch, partition_epoch, new_isr) -> the controller's Result as a dict
AlterIsr = Callable[[str, int, int, int, tuple[int, ...]], Awaitable[dict]]
