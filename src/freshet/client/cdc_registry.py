"""CDC connectors announce themselves in their state topic ``__freshet_cdc_state`` (compacted), as ingest servers do
in ``__freshet_ingest``, so the console shows them with a Kafka client alone (issue 49). The state topic already
holds each slot's snapshot state under the slot's name, so a connector needs no right it did not need before.

Key ``cdc/{name}`` (a slot's name has no ``/``: the two kinds of keys never meet; the name is the replication
slot's unless the config names it); value (JSON)
``{"name", "connector": "postgresql", "database": {"host", "port", "dbname", "user"}, "slot", "publication",
"tables", "topic_prefix", "topics", "status" ("snapshot", "streaming" or "failed"), "error", "slot_lag_bytes",
"lag_read_ms",
"last_change_ms", "snapshot_rows", "changes", "transactions", "acknowledged_lsn", "updated_ms"}``. No password
is ever written. ``slot_lag_bytes`` is what PostgreSQL users check,
``pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)`` of the slot, read by the connector itself every
``ANNOUNCE_EVERY_S``; ``last_change_ms`` the commit time of the last change streamed. A connector that stops
cleanly writes a tombstone; one that fails leaves a last record saying why (``status`` "failed", ``error``).
"""

from __future__ import annotations

import json

CDC_TOPIC = "__freshet_cdc_state"
ANNOUNCEMENT = "cdc/"  # the announcements' keys: ``cdc/{name}``; the other keys are slots' snapshot state
ANNOUNCE_EVERY_S = 2.0


def cdc_record(name: str, info: dict | None) -> tuple[bytes, bytes | None]:
    return f"{ANNOUNCEMENT}{name}".encode(), None if info is None else json.dumps({"name": name, **info}).encode()
