"""Client quotas, as Kafka keeps and enforces them (KIP-13, KIP-55, KIP-219, KIP-546).

Quotas are set at run time with AlterClientQuotas on an *entity*: a user, a client id, or a user and a
client id, each either named or the default (a null name), and read back with DescribeClientQuotas. They
are stored in ``quotas.json`` in the data directory (written whole, atomically) and take effect at once.

The quota a request is held to is the most specific one that matches it, in Kafka's order:
user+client, user+default client, user, default user+client, default user+default client, default user,
client, default client (and last, ``--producer-byte-rate`` given at start-up, as a default client quota).
A named entity's quota is shared by everything it matches (all of alice's clients share
``user=alice``); a default entity's applies to each user or client id on its own.

``producer_byte_rate`` and ``consumer_byte_rate`` are enforced: the bytes a quota entity produced (or was
sent by Fetch) over the last ``window_s`` seconds are compared with the quota; above it the response
carries ``throttle_time_ms`` (how long until the rate is back at the quota) and the broker stops reading
that connection for that long. The data is still written or sent: a quota slows a client, it never drops
what it sent. The byte counts per client id are served on the broker's /metrics either way.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import deque

from kio.schema.errors import ErrorCode

from .durability import write_json_atomically

USER, CLIENT_ID, IP = "user", "client-id", "ip"
BYTE_RATES = ("producer_byte_rate", "consumer_byte_rate")
# what each kind of entity may carry; request_percentage / controller_mutation_rate / connection_creation_rate
# exist in Kafka but this broker does not enforce them, so it does not take them either
KEYS = {USER: BYTE_RATES, CLIENT_ID: BYTE_RATES}
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

Entity = tuple[tuple[str, str | None], ...]  # ((type, name or None for the default), ...) sorted by type


class QuotaError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def entity_key(components) -> Entity:
    """An entity from (type, name) pairs: checked, in a canonical order. Raises QuotaError."""
    seen: dict[str, str | None] = {}
    for entity_type, name in components:
        if entity_type in seen:
            raise QuotaError(ErrorCode.invalid_request, f"entity type {entity_type!r} given twice")
        if entity_type == IP:
            raise QuotaError(ErrorCode.invalid_request, "ip quotas (connection_creation_rate) are not supported")
        if entity_type not in (USER, CLIENT_ID):
            raise QuotaError(ErrorCode.invalid_request, f"unknown entity type {entity_type!r}")
        if name is not None and not name:
            raise QuotaError(ErrorCode.invalid_request, f"an empty {entity_type} name (null is the default)")
        seen[entity_type] = name
    if not seen:
        raise QuotaError(ErrorCode.invalid_request, "an entity needs a user, a client-id or both")
    return tuple(sorted(seen.items()))


class ClientQuotas:
    def __init__(self, path: str | None, default_producer_byte_rate: int = 0, window_s: float = 5.0,
                 clock=time.monotonic) -> None:
        self.path = path
        self.window_s = window_s
        self.clock = clock
        self.default_producer_byte_rate = default_producer_byte_rate
        self.quotas: dict[Entity, dict[str, float]] = {}
        self._windows: dict[tuple, deque] = {}
        self.bytes_by_client: dict[tuple[str, str], int] = {}  # (produce|fetch, client id) -> bytes ever
        self.throttled_ms_by_client: dict[tuple[str, str], int] = {}
        if path and os.path.exists(path):
            with open(path) as f:
                for entry in json.load(f):
                    self.quotas[tuple((t, n) for t, n in entry["entity"])] = dict(entry["values"])

    # -- AlterClientQuotas / DescribeClientQuotas -----------------------------------------------

    def check_ops(self, entity: Entity, ops) -> dict[str, float | None]:
        """The changes of one entry ((key, value, remove) each), checked; None removes. Raises QuotaError."""
        allowed = set(BYTE_RATES)
        for entity_type, _ in entity:
            allowed &= set(KEYS[entity_type])
        changes: dict[str, float | None] = {}
        for key, value, remove in ops:
            if key not in allowed:
                raise QuotaError(ErrorCode.invalid_request,
                                 f"{key!r} is not a quota this broker takes for {_describe(entity)} "
                                 f"(it takes {', '.join(sorted(allowed))})")
            if key in changes:
                raise QuotaError(ErrorCode.invalid_request, f"{key!r} given twice")
            if remove:
                changes[key] = None
                continue
            if not math.isfinite(value) or value <= 0:
                raise QuotaError(ErrorCode.invalid_request, f"{key} must be a positive number, not {value}")
            if key in BYTE_RATES and value != int(value):
                raise QuotaError(ErrorCode.invalid_request, f"{key} must be a whole number of bytes, not {value}")
            changes[key] = value
        return changes

    def alter(self, changes: dict[Entity, dict[str, float | None]]) -> None:
        for entity, ops in changes.items():
            values = dict(self.quotas.get(entity, {}))
            for key, value in ops.items():
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = value
            if values:
                self.quotas[entity] = values
            else:
                self.quotas.pop(entity, None)
        self._windows.clear()  # entities may now resolve differently
        self._save()

    def replace(self, quotas: dict[Entity, dict[str, float]]) -> None:
        """Every quota at once, from elsewhere (a cluster's metadata): not written to this broker's file."""
        self.quotas = {entity: dict(values) for entity, values in quotas.items() if values}
        self._windows.clear()

    def describe(self, components, strict: bool) -> list[tuple[Entity, dict[str, float]]]:
        """Entities matching every (type, match type, name) filter; ``strict``: no other entity types."""
        wanted_types = set()
        for entity_type, match_type, _ in components:
            if entity_type not in (USER, CLIENT_ID, IP):
                raise QuotaError(ErrorCode.invalid_request, f"unknown entity type {entity_type!r}")
            if entity_type in wanted_types:
                raise QuotaError(ErrorCode.invalid_request, f"entity type {entity_type!r} filtered twice")
            if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
                raise QuotaError(ErrorCode.invalid_request, f"unknown match type {match_type}")
            wanted_types.add(entity_type)
        out = []
        for entity, values in sorted(self.quotas.items(), key=lambda kv: repr(kv[0])):
            names = dict(entity)
            if strict and set(names) != wanted_types:
                continue
            ok = True
            for entity_type, match_type, match in components:
                if entity_type not in names:
                    ok = False
                elif match_type == MATCH_EXACT:
                    ok = ok and names[entity_type] == match and match is not None
                elif match_type == MATCH_DEFAULT:
                    ok = ok and names[entity_type] is None
            if ok:
                out.append((entity, values))
        return out

    def _save(self) -> None:
        if self.path:
            write_json_atomically(self.path, [{"entity": list(map(list, e)), "values": v}
                                              for e, v in self.quotas.items()])

    # -- enforcement -----------------------------------------------------------------------------

    def quota_for(self, key: str, user: str, client_id: str) -> tuple[float, tuple] | None:
        """The quota ``key`` of this user and client id, and the entity whose window it counts in."""
        q = self.quotas
        for entity, window in (
            (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
            (((CLIENT_ID, None), (USER, user)), (user, client_id)),
            (((USER, user),), (user, None)),
            (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
            (((CLIENT_ID, None), (USER, None)), (user, client_id)),
            (((USER, None),), (user, None)),
            (((CLIENT_ID, client_id),), (None, client_id)),
            (((CLIENT_ID, None),), (None, client_id)),
        ):
            value = q.get(entity, {}).get(key)
            if value is not None:
                return value, (key, entity, window)
        if key == "producer_byte_rate" and self.default_producer_byte_rate > 0:
            return self.default_producer_byte_rate, (key, "start-up default", (None, client_id))
        return None

    def record(self, key: str, user: str, client_id: str, nbytes: int) -> int:
        """Account ``nbytes`` produced (``producer_byte_rate``) or fetched (``consumer_byte_rate``); return the
        throttle time in ms (0: within quota)."""
        kind = "produce" if key == "producer_byte_rate" else "fetch"
        self.bytes_by_client[(kind, client_id)] = self.bytes_by_client.get((kind, client_id), 0) + nbytes
        found = self.quota_for(key, user, client_id) if self.quotas or self.default_producer_byte_rate else None
        if found is None:
            return 0
        rate_limit, window_key = found
        now = self.clock()
        samples = self._windows.setdefault(window_key, deque())
        samples.append((now, nbytes))
        while samples and samples[0][0] < now - self.window_s:
            samples.popleft()
        total = sum(n for _, n in samples)
        span = max(now - samples[0][0], 1.0) if samples else self.window_s
        if total / span <= rate_limit:
            return 0
        throttle = int((total / rate_limit - span) * 1000)  # until the window's bytes fit the quota
        self.throttled_ms_by_client[(kind, client_id)] = self.throttled_ms_by_client.get((kind, client_id), 0) \
            + throttle
        return throttle


def _describe(entity: Entity) -> str:
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)
