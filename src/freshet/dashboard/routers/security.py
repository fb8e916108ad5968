"""Security as a Kafka admin client sees it: users (SCRAM credentials), ACLs and client quotas; listed, added,
changed and removed through the cluster's own APIs. Input that cannot be right is refused before anything is
sent (400); a refusal by the cluster is one line with its Kafka error name, and changes nothing."""

from __future__ import annotations

import asyncio
import threading
from typing import Literal

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field

from freshet.client.quotas import ENTITY_TYPES, QuotaAdmin, QuotaRefused
from freshet.client.security import MECHANISMS, OPERATIONS, RESOURCE_NOT_FOUND, RESOURCE_TYPES, broker_authorizer

from ..refusals import refusal
from . import Admin, Credentials, Source

router = APIRouter()
TIMEOUT_S = 15
RESOURCE_NAMES = {v: k for k, v in RESOURCE_TYPES.items()}


# -- users ------------------------------------------------------------------------------------------------------

@router.get("/api/security/users")
async def users(admin: Admin) -> dict:
    """Every user with SCRAM credentials: its mechanisms and iteration counts (never a password or a hash)."""
    def run() -> dict:
        try:
            described = admin.describe_user_scram_credentials().result(TIMEOUT_S)
        except KafkaException as exc:
            raise refusal(exc, "cannot list users") from None
        return {"users": [{"name": user, "credentials": sorted(
            ({"mechanism": i.mechanism.name.replace("_", "-"), "iterations": i.iterations}
             for i in d.scram_credential_infos), key=lambda c: c["mechanism"])}
            for user, d in sorted(described.items())]}

    return await asyncio.to_thread(run)


class Credential(BaseModel):
    name: str
    password: str
    mechanism: str = "SCRAM-SHA-256"
    iterations: int = Field(8192, ge=4096, le=16384)  # Kafka's bounds


@router.post("/api/security/users")
async def set_user(body: Credential, admin: Admin) -> dict:
    """Adds the user, or changes its password for that mechanism (UpsertUserScramCredentials)."""
    if not body.name.strip():
        raise HTTPException(400, "a user needs a name")
    if not body.password:
        raise HTTPException(400, "a password may not be empty")
    if body.mechanism not in MECHANISMS:
        raise HTTPException(400, f"mechanism must be one of {', '.join(MECHANISMS)}, not {body.mechanism!r}")
    upsert = UserScramCredentialUpsertion(body.name, ScramCredentialInfo(MECHANISMS[body.mechanism],
                                                                         body.iterations), body.password.encode())
    await asyncio.to_thread(_alter_credentials, admin, [upsert], f"cannot set {body.name!r}'s password")
    return {"name": body.name, "mechanism": body.mechanism}


@router.delete("/api/security/users/{name}")
async def delete_user(name: str, admin: Admin, mechanism: str | None = None) -> dict:
    """Deletes the user's credentials (every mechanism, or ``mechanism``); 404 when it has none."""
    if mechanism is not None and mechanism not in MECHANISMS:
        raise HTTPException(400, f"mechanism must be one of {', '.join(MECHANISMS)}, not {mechanism!r}")

    def run() -> list[str]:
        try:
            found = admin.describe_user_scram_credentials([name])[name].result(TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].code() == RESOURCE_NOT_FOUND:
                raise HTTPException(404, f"no user {name!r} (RESOURCE_NOT_FOUND)") from None
            raise refusal(exc, f"cannot look up {name!r}") from None
        had = [i.mechanism.name.replace("_", "-") for i in found.scram_credential_infos]
        gone = [m for m in had if mechanism in (None, m)]
        if not gone:
            raise HTTPException(404, f"user {name!r} has no {mechanism} credential (it has {', '.join(had)})")
        _alter_credentials(admin, [UserScramCredentialDeletion(name, MECHANISMS[m]) for m in gone],
                           f"cannot delete {name!r}")
        return gone

    return {"deleted": name, "mechanisms": await asyncio.to_thread(run)}


def _alter_credentials(admin, alterations: list, what: str) -> None:
    try:
        for future in admin.alter_user_scram_credentials(alterations).values():
            future.result(TIMEOUT_S)
    except KafkaException as exc:
        raise refusal(exc, what) from None


# -- ACLs -------------------------------------------------------------------------------------------------------

class AclSpec(BaseModel):
    principal: str  # User:alice
    resource_type: str  # topic, group, cluster, transactional-id
    resource_name: str = ""  # the cluster's is kafka-cluster
    pattern: Literal["literal", "prefixed"] = "literal"
    operation: str  # READ, WRITE, ... ALL
    permission: Literal["ALLOW", "DENY"] = "ALLOW"
    host: str = "*"


def _checked(spec: AclSpec) -> AclBinding:
    """The binding, or a 400 naming what is wrong (nothing is sent)."""
    if not spec.principal.startswith("User:") or spec.principal == "User:":
        raise HTTPException(400, f"principal must be User:<name> (or User:*), not {spec.principal!r}")
    if spec.resource_type not in RESOURCE_TYPES:
        raise HTTPException(400, f"resource_type must be one of {', '.join(RESOURCE_TYPES)}, "
                                 f"not {spec.resource_type!r}")
    name = "kafka-cluster" if spec.resource_type == "cluster" else spec.resource_name
    if not name:
        raise HTTPException(400, f"a {spec.resource_type} ACL needs a resource_name (* for every one)")
    operation = spec.operation.upper().replace("-", "_")
    if operation not in OPERATIONS:
        raise HTTPException(400, f"operation must be one of {', '.join(OPERATIONS)}, not {spec.operation!r}")
    return AclBinding(RESOURCE_TYPES[spec.resource_type], name,
                      ResourcePatternType.PREFIXED if spec.pattern == "prefixed" else ResourcePatternType.LITERAL,
                      spec.principal, spec.host, AclOperation[operation], AclPermissionType[spec.permission])


def _row(b) -> dict:
    return {"principal": b.principal, "host": b.host, "operation": b.operation.name,
            "permission": b.permission_type.name, "resource_type": RESOURCE_NAMES.get(b.restype, b.restype.name),
            "resource_name": b.name,
            "pattern": "prefixed" if b.resource_pattern_type == ResourcePatternType.PREFIXED else "literal"}


def _no_authorizer() -> HTTPException:
    return HTTPException(400, "the broker has no authorizer, so it keeps no ACLs and lets every client do "
                              "everything (SECURITY_DISABLED; Freshet: freshet broker start --authorizer)")


@router.get("/api/security/acls")
async def acls(admin: Admin, principal: str | None = None, resource_type: str | None = None,
               resource_name: str | None = None) -> dict:
    """The ACLs, all or those of a principal and/or a resource (its literal and prefixed bindings)."""
    if resource_type is not None and resource_type not in RESOURCE_TYPES:
        raise HTTPException(400, f"resource_type must be one of {', '.join(RESOURCE_TYPES)}, not {resource_type!r}")

    def run() -> dict:
        wanted = AclBindingFilter(RESOURCE_TYPES[resource_type] if resource_type else ResourceType.ANY,
                                  resource_name or None, ResourcePatternType.ANY, principal or None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
        try:
            found = admin.describe_acls(wanted).result(TIMEOUT_S)
        except KafkaException as exc:
            raise refusal(exc, "cannot list ACLs") from None
        note = None
        if not found:  # librdkafka answers [] for the broker's refusals (SECURITY_DISABLED, not authorized)
            authorizer = broker_authorizer(admin)
            if authorizer == "":
                raise _no_authorizer()
            if authorizer is None:
                note = ("no ACLs, or none this user may see: librdkafka passes on an empty list where the cluster "
                        "refuses (DescribeAcls needs DESCRIBE on the cluster)")
        rows = sorted((_row(b) for b in found), key=lambda r: (r["resource_type"], r["resource_name"],
                                                                 r["principal"], r["operation"], r["permission"]))
        return {"acls": rows, "operations": OPERATIONS, "resource_types": list(RESOURCE_TYPES), "note": note}

    return await asyncio.to_thread(run)


@router.post("/api/security/acls", status_code=201)
async def add_acl(spec: AclSpec, admin: Admin) -> dict:
    binding = _checked(spec)

    def run() -> None:
        try:
            for future in admin.create_acls([binding]).values():
                future.result(TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].name() == "SECURITY_DISABLED":
                raise _no_authorizer() from None
            raise refusal(exc, "cannot add the ACL") from None

    await asyncio.to_thread(run)
    return {"added": _row(binding)}


@router.post("/api/security/acls/delete")
async def delete_acl(spec: AclSpec, admin: Admin) -> dict:
    """Removes exactly that binding (DeleteAcls with a filter that matches it alone); 404 when there is none."""
    b = _checked(spec)
    exact = AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                             b.permission_type)

    def run() -> list:
        try:
            return [x for f in admin.delete_acls([exact]).values() for x in f.result(TIMEOUT_S)]
        except KafkaException as exc:
            if exc.args[0].name() == "SECURITY_DISABLED":
                raise _no_authorizer() from None
            raise refusal(exc, "cannot remove the ACL") from None

    removed = await asyncio.to_thread(run)
    if not removed:
        raise HTTPException(404, "no such ACL: nothing was removed")
    return {"removed": [_row(x) for x in removed]}


# -- client quotas ----------------------------------------------------------------------------------------------

_quota_admins: dict[tuple, QuotaAdmin] = {}
_quota_lock = threading.RLock()


def _quotas(collector, credentials: dict | None) -> QuotaAdmin:
    """One kafka-python connection per cluster and acting user (the signed-in one, else the dashboard's)."""
    key = (collector.bootstrap or "", tuple(sorted((credentials or {}).items())))
    with _quota_lock:
        admin = _quota_admins.get(key)
        if admin is None:
            admin = _quota_admins[key] = QuotaAdmin(collector.bootstrap, overrides=credentials)
        return admin


class QuotaChange(BaseModel):
    entity: dict[str, str | None]  # {"user": "alice"}, {"user": null} (the default user), {"client-id": "etl"}
    set: dict[str, float] = {}
    remove: list[str] = []


def _quota_call(collector, credentials: dict | None, what: str, call):
    with _quota_lock:  # one request at a time on a kafka-python connection
        try:
            return call(_quotas(collector, credentials))
        except QuotaRefused as exc:
            status = 403 if "AUTHORIZATION" in exc.name else 400
            raise HTTPException(status, f"{what}: {exc}") from None
        except Exception as exc:  # kafka-python's own errors (unreachable, timed out)
            _quotas(collector, credentials).close()
            raise HTTPException(502, f"{what}: {type(exc).__name__}: {exc}") from None


@router.get("/api/security/quotas")
async def quotas(collector: Source, credentials: Credentials) -> dict:
    """Every client quota: its entity (user and/or client-id; null: that type's default) and values."""
    found = await asyncio.to_thread(_quota_call, collector, credentials, "cannot list quotas", lambda q: q.describe())
    return {"quotas": [{"entity": q.entity, "values": q.values} for q in found]}


@router.post("/api/security/quotas")
async def alter_quotas(change: QuotaChange, collector: Source, credentials: Credentials) -> dict:
    """Sets and removes one entity's quota values (AlterClientQuotas); answers the entity's quotas after it. The
    broker checks the whole entry before applying any of it."""
    if not change.entity:
        raise HTTPException(400, "an entity needs a user, a client-id or both, e.g. {\"user\": \"alice\"}")
    unknown = [t for t in change.entity if t not in ENTITY_TYPES]
    if unknown:
        raise HTTPException(400, f"entity types are {', '.join(ENTITY_TYPES)}, not {unknown[0]!r}")
    if not change.set and not change.remove:
        raise HTTPException(400, "nothing to change: give set {name: value} and/or remove [name]")
    what = f"cannot change the quotas of {_entity_line(change.entity)}"
    await asyncio.to_thread(_quota_call, collector, credentials, what,
                            lambda q: q.alter(change.entity, change.set, change.remove))
    found = await asyncio.to_thread(_quota_call, collector, credentials, "cannot list quotas",
                                    lambda q: q.describe(change.entity))
    return {"entity": change.entity, "values": found[0].values if found else {}}


def _entity_line(entity: dict) -> str:
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in sorted(entity.items()))
