"""Users (SCRAM credentials) and ACLs through confluent-kafka's admin client: what ``freshet users`` and
``freshet acl`` do, against Freshet or any Kafka cluster."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from .errors import ClientError
from .config import admin_config

MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
RESOURCE_TYPES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP, "cluster": ResourceType.BROKER,
                  "transactional-id": ResourceType.TRANSACTIONAL_ID}
OPERATIONS = [op.name for op in AclOperation if op.name not in ("UNKNOWN", "ANY")]


def _admin(bootstrap: str | None) -> AdminClient:
    return AdminClient(admin_config(bootstrap, {"log_level": 0}))


def _message(exc: KafkaException) -> str:
    err = exc.args[0]
    text = err.str() if hasattr(err, "str") else str(err)
    return "".join(c for c in text if c.isprintable())


RESOURCE_NOT_FOUND = 91


def add_user(bootstrap: str | None, user: str, password: str, mechanisms: list[str], iterations: int = 4096) -> None:
    alterations = [UserScramCredentialUpsertion(user, ScramCredentialInfo(MECHANISMS[m], iterations), password.encode())
                   for m in mechanisms]
    _alter(bootstrap, alterations, f"cannot set {user!r}'s credentials")


def delete_user(bootstrap: str | None, user: str) -> list[str]:
    """Delete every SCRAM credential of ``user``; returns the mechanisms it had."""
    described = list_users(bootstrap, [user])
    mechanisms = described.get(user, [])
    if not mechanisms:
        raise ClientError(f"no user {user!r}")
    _alter(bootstrap, [UserScramCredentialDeletion(user, MECHANISMS[m]) for m, _ in mechanisms],
           f"cannot delete {user!r}")
    return [m for m, _ in mechanisms]


def _alter(bootstrap: str | None, alterations: list, what: str) -> None:
    try:
        admin = _admin(bootstrap)  # kept alive until the futures are done
        for future in admin.alter_user_scram_credentials(alterations).values():
            future.result(15)
    except KafkaException as exc:
        raise ClientError(f"{what}: {_message(exc)}") from None


def list_users(bootstrap: str | None, users: list[str] | None = None) -> dict[str, list[tuple[str, int]]]:
    """user -> [(mechanism, iterations)]."""
    try:
        admin = _admin(bootstrap)
        result = admin.describe_user_scram_credentials(users)
        described = result.result(15) if users is None else {u: f.result(15) for u, f in result.items()}
    except KafkaException as exc:
        if users is not None and getattr(exc.args[0], "code", lambda: None)() == RESOURCE_NOT_FOUND:
            return {}
        raise ClientError(f"cannot list users: {_message(exc)}") from None
    return {user: sorted((info.mechanism.name.replace("_", "-"), info.iterations)
                         for info in d.scram_credential_infos) for user, d in described.items()}


@dataclass(frozen=True, order=True)
class Acl:
    permission: str  # ALLOW / DENY
    principal: str
    host: str
    operation: str
    resource_type: str  # topic, group, cluster, transactional-id
    resource_name: str
    prefixed: bool

    def line(self) -> str:
        pattern = "prefixed" if self.prefixed else "literal"
        return (f"{self.permission}\t{self.principal}\t{self.host}\t{self.operation}\t{self.resource_type}\t"
                f"{self.resource_name}\t{pattern}")


def _binding(acl: Acl) -> AclBinding:
    return AclBinding(RESOURCE_TYPES[acl.resource_type], acl.resource_name,
                      ResourcePatternType.PREFIXED if acl.prefixed else ResourcePatternType.LITERAL,
                      acl.principal, acl.host, AclOperation[acl.operation], AclPermissionType[acl.permission])


def add_acls(bootstrap: str | None, acls: list[Acl]) -> None:
    try:
        admin = _admin(bootstrap)
        for future in admin.create_acls([_binding(a) for a in acls]).values():
            future.result(15)
    except KafkaException as exc:
        raise ClientError(f"cannot add the ACL: {_message(exc)}") from None


def _filter(resource_type: str | None, resource_name: str | None, principal: str | None,
            operation: str | None, permission: str | None, prefixed: bool | None) -> AclBindingFilter:
    pattern = (ResourcePatternType.ANY if prefixed is None
               else ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL)
    return AclBindingFilter(RESOURCE_TYPES[resource_type] if resource_type else ResourceType.ANY, resource_name,
                            pattern, principal, None, AclOperation[operation] if operation else AclOperation.ANY,
                            AclPermissionType[permission] if permission else AclPermissionType.ANY)


def _acl(b) -> Acl:
    kinds = {v: k for k, v in RESOURCE_TYPES.items()}
    return Acl(b.permission_type.name, b.principal, b.host, b.operation.name, kinds.get(b.restype, str(b.restype)),
               b.name, b.resource_pattern_type == ResourcePatternType.PREFIXED)


def list_acls(bootstrap: str | None, resource_type: str | None = None, resource_name: str | None = None,
              principal: str | None = None) -> list[Acl]:
    try:
        admin = _admin(bootstrap)
        found = admin.describe_acls(_filter(resource_type, resource_name, principal, None, None, None)).result(15)
    except KafkaException as exc:
        raise ClientError(f"cannot list ACLs: {_message(exc)}") from None
    if not found and broker_authorizer(admin) == "":
        # librdkafka drops DescribeAcls' SECURITY_DISABLED and answers an empty list: the broker's config tells
        raise ClientError("the broker has no authorizer, so it keeps no ACLs and lets every client do everything "
                          "(authorizer.class.name is empty; Freshet: freshet broker start --authorizer)")
    return sorted(_acl(b) for b in found)


def broker_authorizer(admin: AdminClient, timeout: float = 15) -> str | None:
    """The authorizer.class.name of the broker ``admin`` reaches: "" (none: no ACLs, everything allowed), a class
    name, or None when it cannot be read (not allowed to describe the cluster's configs, or no such config)."""
    try:
        node = admin.list_topics(timeout=timeout).orig_broker_id
        resource = ConfigResource(ResourceType.BROKER, str(node))
        entry = admin.describe_configs([resource])[resource].result(timeout).get("authorizer.class.name")
    except KafkaException:
        return None
    return None if entry is None else entry.value or ""


def remove_acls(bootstrap: str | None, resource_type: str | None, resource_name: str | None, principal: str | None,
                operation: str | None, permission: str | None, prefixed: bool | None) -> list[Acl]:
    acl_filter = _filter(resource_type, resource_name, principal, operation, permission, prefixed)
    try:
        admin = _admin(bootstrap)
        removed = [b for f in admin.delete_acls([acl_filter]).values() for b in f.result(15)]
    except KafkaException as exc:
        raise ClientError(f"cannot remove ACLs: {_message(exc)}") from None
    return sorted(_acl(b) for b in removed)
