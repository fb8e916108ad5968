"""librdkafka settings that suit Freshet (and any Kafka cluster), with the reason for each."""

from __future__ import annotations

import os
import uuid

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def resolve_bootstrap(bootstrap: str | None = None) -> str:
    """An explicit address, else $FRESHET_BOOTSTRAP, else 127.0.0.1:9092."""
    return bootstrap or os.environ.get("FRESHET_BOOTSTRAP") or DEFAULT_BOOTSTRAP


def producer_config(bootstrap: str | None = None, overrides: dict | None = None) -> dict:
    """Idempotent, acks=all, small linger: no duplicates on retry, batches of useful size."""
    config = {
        "bootstrap.servers": resolve_bootstrap(bootstrap),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
    }
    config.update(overrides or {})
    return config


def admin_config(bootstrap: str | None = None, overrides: dict | None = None) -> dict:
    """An admin client: just the cluster's address (and whatever security settings ``overrides`` adds)."""
    return {"bootstrap.servers": resolve_bootstrap(bootstrap), **(overrides or {})}


def consumer_config(bootstrap: str | None = None, group_id: str | None = None, overrides: dict | None = None) -> dict:
    """A consumer that reads fast from Python.

    ``fetch.queue.backoff.ms=10``: librdkafka's default of 1000 ms stops fetching a partition
    for a whole second whenever the local queue is momentarily full, which caps a Python
    consumer near 200k msgs/s (measured: 1.09M msgs/s with 10 ms on the same data).
    """
    config = {
        "bootstrap.servers": resolve_bootstrap(bootstrap),
        "group.id": group_id or f"freshet-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.queue.backoff.ms": 10,
    }
    config.update(overrides or {})
    return config


def share_consumer_config(bootstrap: str | None, group_id: str, overrides: dict | None = None) -> dict:
    """A share consumer (queues on the log, KIP-932) that acknowledges each record itself: explicit mode, so a
    record is accepted only once the application says so, and anything else comes back to the group."""
    return {"bootstrap.servers": resolve_bootstrap(bootstrap), "group.id": group_id,
            "share.acknowledgement.mode": "explicit", "log_level": 3, **(overrides or {})}
