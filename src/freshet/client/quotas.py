"""Client quotas (KIP-546: DescribeClientQuotas, AlterClientQuotas) read and changed as any Kafka client does.
librdkafka has no call for them, so kafka-python's admin connection sends the two requests, with the same
security settings as every other client of ours (as ``log_dirs.py`` does).

An entity is a dict of entity type to name: ``{"user": "alice"}``, ``{"user": "alice", "client-id": "etl"}``;
a name of None is that type's default (``{"user": None}``: every user without a quota of their own).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import kafka_python
from .config import resolve_bootstrap

ENTITY_TYPES = ("user", "client-id", "ip")
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


class QuotaRefused(Exception):
    """The cluster refused: ``name`` is its Kafka error name (INVALID_REQUEST, CLUSTER_AUTHORIZATION_FAILED, ...),
    the message its own words."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}" if message else name)
        self.name = name


@dataclass
class Quota:
    entity: dict[str, str | None]
    values: dict[str, float]


class QuotaAdmin:
    def __init__(self, bootstrap: str | None = None, timeout_ms: int = 10_000, overrides: dict | None = None) -> None:
        """``overrides``: librdkafka-named settings over the FRESHET_* security ones (another user's SASL name
        and password)."""
        self.bootstrap = resolve_bootstrap(bootstrap)
        self.timeout_ms = timeout_ms
        self.overrides = dict(overrides or {})
        self._admin = None

    def _send(self, request):
        if self._admin is None:
            self._admin = kafka_python.admin_client(self.bootstrap, self.timeout_ms, self.overrides)
        return kafka_python.send(self._admin, request)  # kafka-python has the requests but no admin call for them

    def describe(self, entity: dict[str, str | None] | None = None) -> list[Quota]:
        """Every quota (``entity`` None), or those of entities matching ``entity`` exactly (a None name: the
        default of that type), sorted by entity."""
        from kafka.protocol.admin.client_quotas import DescribeClientQuotasRequest

        component = DescribeClientQuotasRequest.ComponentData
        components = [] if entity is None else [
            component(entity_type=t, match_type=MATCH_DEFAULT if n is None else MATCH_EXACT, match=n)
            for t, n in entity.items()]
        response = self._send(DescribeClientQuotasRequest(components=components, strict=entity is not None,
                                                          version=1))
        _raise(response.error_code, response.error_message)
        found = [Quota({e.entity_type: e.entity_name for e in entry.entity},
                       {v.key: v.value for v in entry.values}) for entry in response.entries or ()]
        return sorted(found, key=lambda q: sorted((t, n or "") for t, n in q.entity.items()))

    def alter(self, entity: dict[str, str | None], set_values: dict[str, float], remove: list[str],
              validate_only: bool = False) -> None:
        """Sets and removes quota values of one entity; the broker checks the entry before applying any of it."""
        from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest

        entry = AlterClientQuotasRequest.EntryData
        ops = [entry.OpData(key=k, value=float(v), remove=False) for k, v in set_values.items()]
        ops += [entry.OpData(key=k, value=0.0, remove=True) for k in remove]
        request = AlterClientQuotasRequest(entries=[entry(
            entity=[entry.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()], ops=ops)],
            validate_only=validate_only, version=1)
        for result in self._send(request).entries:
            _raise(result.error_code, result.error_message)

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None


def _raise(code: int, message: str | None) -> None:
    if code:
        from kafka.errors import for_code

        name = for_code(code).__name__.removesuffix("Error")
        raise QuotaRefused(_kafka_name(name, code), message or "")


def _kafka_name(class_name: str, code: int) -> str:
    """kafka-python's error class name as Kafka spells the error (InvalidRequestError -> INVALID_REQUEST)."""
    out = []
    for i, c in enumerate(class_name):
        if c.isupper() and i and (not class_name[i - 1].isupper() or
                                  (i + 1 < len(class_name) and class_name[i + 1].islower())):
            out.append("_")
        out.append(c.upper())
    return "".join(out) or f"ERROR_{code}"
