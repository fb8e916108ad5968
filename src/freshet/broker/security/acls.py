"""Access control lists, Kafka's model: a binding says that a principal from a host may (ALLOW) or may not (DENY)
perform an operation on a resource (a TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID) named literally, by prefix, or
``*`` for all. DENY wins; ALL matches every operation; READ, WRITE, DELETE and ALTER imply DESCRIBE, and
ALTER_CONFIGS implies DESCRIBE_CONFIGS. Super users may do anything. A resource no binding names is open only
when ``allow_everyone_if_no_acl_found`` (Kafka's ``allow.everyone.if.no.acl.found``) says so.

Bindings are kept in one JSON file in the data directory (``security/acls.json``, replaced atomically and
fsync'd before CreateAcls / DeleteAcls answer), so they survive restarts.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from ..durability import write_json_atomically

# resource types
ANY_RESOURCE, TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 1, 2, 3, 4, 5
RESOURCE_NAMES = {TOPIC: "TOPIC", GROUP: "GROUP", CLUSTER: "CLUSTER", TRANSACTIONAL_ID: "TRANSACTIONAL_ID"}
CLUSTER_NAME = "kafka-cluster"
# pattern types
ANY_PATTERN, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
PATTERN_NAMES = {LITERAL: "LITERAL", PREFIXED: "PREFIXED"}
WILDCARD = "*"
# operations
ANY_OP, ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, \
    IDEMPOTENT_WRITE = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12
OPERATION_NAMES = {ALL: "ALL", READ: "READ", WRITE: "WRITE", CREATE: "CREATE", DELETE: "DELETE", ALTER: "ALTER",
                   DESCRIBE: "DESCRIBE", CLUSTER_ACTION: "CLUSTER_ACTION", DESCRIBE_CONFIGS: "DESCRIBE_CONFIGS",
                   ALTER_CONFIGS: "ALTER_CONFIGS", IDEMPOTENT_WRITE: "IDEMPOTENT_WRITE"}
# permissions
ANY_PERMISSION, DENY, ALLOW = 1, 2, 3
PERMISSION_NAMES = {DENY: "DENY", ALLOW: "ALLOW"}

_IMPLIED = {DESCRIBE: {READ, WRITE, DELETE, ALTER}, DESCRIBE_CONFIGS: {ALTER_CONFIGS}}
_OPERATIONS_OF = {  # what each resource type can be the object of (CreateAcls refuses the rest)
    TOPIC: {ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS},
    GROUP: {ALL, READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS},
    CLUSTER: {ALL, CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE},
    TRANSACTIONAL_ID: {ALL, WRITE, DESCRIBE},
}


NO_AUTHORIZED_OPERATIONS = -(2**31)  # INT32_MIN: what Kafka answers where the authorized operations were not asked for


def authorized_operations(allowed, resource_type: int) -> int:
    """KIP-430's authorized operations of a resource: a bit field (1 << code) of the operations that apply to its
    type (Kafka's AclEntry.supportedOperations: those a binding may name, ALL aside) for which ``allowed(op)``
    says yes, each decided as a request doing it would be (so DESCRIBE comes with READ, WRITE, DELETE or ALTER)."""
    field = 0
    for operation in sorted(_OPERATIONS_OF[resource_type] - {ALL}):
        if allowed(operation):
            field |= 1 << operation
    return field


class AclError(ValueError):
    pass


@dataclass(frozen=True, order=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def validate(self) -> None:
        if self.resource_type not in RESOURCE_NAMES:
            raise AclError(f"resource type {self.resource_type} cannot hold ACLs")
        if self.pattern_type not in PATTERN_NAMES:
            raise AclError("a binding's pattern type is LITERAL or PREFIXED")
        if not self.resource_name:
            raise AclError("the resource name must not be empty")
        if self.resource_type == CLUSTER and self.resource_name != CLUSTER_NAME:
            raise AclError(f"the cluster resource is named {CLUSTER_NAME!r}")
        if self.operation not in _OPERATIONS_OF[self.resource_type]:
            raise AclError(f"{OPERATION_NAMES.get(self.operation, self.operation)} does not apply to "
                           f"{RESOURCE_NAMES[self.resource_type]}")
        if self.permission not in PERMISSION_NAMES:
            raise AclError("the permission is ALLOW or DENY")
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            raise AclError(f"a principal looks like User:name, not {self.principal!r}")
        if not self.host:
            raise AclError("the host must not be empty ('*' for any)")

    def names_resource(self, resource_type: int, name: str) -> bool:
        if resource_type != self.resource_type:
            return False
        if self.pattern_type == LITERAL:
            return self.resource_name in (name, WILDCARD)
        return name.startswith(self.resource_name)

    def describe(self) -> str:
        return (f"{PERMISSION_NAMES[self.permission]} {self.principal} from {self.host} "
                f"{OPERATION_NAMES[self.operation]} {RESOURCE_NAMES[self.resource_type]} "
                f"{self.resource_name}{' (prefix)' if self.pattern_type == PREFIXED else ''}")


@dataclass(frozen=True)
class AclFilter:
    """What DescribeAcls and DeleteAcls match: ANY / MATCH types and None names match more than one binding."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ANY_RESOURCE and b.resource_type != self.resource_type:
            return False
        if self.pattern_type == MATCH:  # the bindings that would apply to a resource of this literal name
            if self.resource_name is not None and not (
                    (b.pattern_type == LITERAL and b.resource_name in (self.resource_name, WILDCARD))
                    or (b.pattern_type == PREFIXED and self.resource_name.startswith(b.resource_name))):
                return False
        else:
            if self.pattern_type != ANY_PATTERN and b.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and b.resource_name != self.resource_name:
                return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        if self.operation != ANY_OP and b.operation != self.operation:
            return False
        return self.permission == ANY_PERMISSION or b.permission == self.permission

    def validate(self) -> None:
        if self.resource_type not in (ANY_RESOURCE, *RESOURCE_NAMES):
            raise AclError(f"unknown resource type {self.resource_type}")
        if self.pattern_type not in (ANY_PATTERN, MATCH, LITERAL, PREFIXED):
            raise AclError(f"unknown pattern type {self.pattern_type}")
        if self.operation not in (ANY_OP, *OPERATION_NAMES):
            raise AclError(f"unknown operation {self.operation}")
        if self.permission not in (ANY_PERMISSION, DENY, ALLOW):
            raise AclError(f"unknown permission {self.permission}")


def _applies(b: AclBinding, principal: str, host: str, operations: set[int]) -> bool:
    """Whether binding ``b`` speaks of this principal (or everyone), from this host, for one of ``operations``."""
    return (b.principal in (principal, "User:*") and b.host in (host, WILDCARD)
            and (b.operation == ALL or b.operation in operations))


class Authorizer:
    def __init__(self, path: str, super_users: set[str], allow_everyone_if_no_acl_found: bool) -> None:
        self.path = path
        self.super_users = set(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.bindings: set[AclBinding] = set()
        # decisions already taken: every produce and fetch asks for each topic, and bindings change rarely
        self._decisions: dict[tuple[str, str, int, int, str], bool] = {}
        if os.path.exists(path):
            with open(path) as f:
                self.bindings = {AclBinding(**b) for b in json.load(f)}

    def authorize(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        key = (principal, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            if len(self._decisions) >= 100_000:
                self._decisions.clear()
            decision = self._decisions[key] = self._decide(principal, host, operation, resource_type, name)
        return decision

    def _decide(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        relevant = [b for b in self.bindings if b.names_resource(resource_type, name)]
        if not relevant:
            return self.allow_everyone_if_no_acl_found
        wanted = {operation} | _IMPLIED.get(operation, set())
        if any(b.permission == DENY and _applies(b, principal, host, {operation}) for b in relevant):
            return False
        return any(b.permission == ALLOW and _applies(b, principal, host, wanted) for b in relevant)

    def authorize_by_resource_type(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Whether ``principal`` may do ``operation`` on *some* resource of the type, existing or not (Kafka's
        authorizeByResourceType, e.g. an idempotent producer with WRITE on a topic prefix whose topics are not
        created yet): an ALLOW binding for it that no DENY covers (a DENY on the same literal name, on ``*``, or
        on a prefix of the allowed name)."""
        if principal in self.super_users:
            return True
        of_type = [b for b in self.bindings if b.resource_type == resource_type]
        if not of_type:
            return self.allow_everyone_if_no_acl_found
        wanted = {operation} | _IMPLIED.get(operation, set())
        denies = [b for b in of_type if b.permission == DENY and _applies(b, principal, host, {operation})]

        def denied(allow: AclBinding) -> bool:
            for d in denies:
                if d.pattern_type == LITERAL and d.resource_name == WILDCARD:
                    return True
                if d.pattern_type == PREFIXED and allow.resource_name.startswith(d.resource_name):
                    return True
                if (d.pattern_type == LITERAL and allow.pattern_type == LITERAL
                        and d.resource_name == allow.resource_name):
                    return True
            return False

        return any(b.permission == ALLOW and _applies(b, principal, host, wanted) and not denied(b) for b in of_type)

    def create(self, bindings: list[AclBinding]) -> None:
        self.bindings |= set(bindings)
        self._decisions.clear()
        self._save()

    def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        matched = [sorted(b for b in self.bindings if f.matches(b)) for f in filters]
        removed = {b for group in matched for b in group}
        if removed:
            self.bindings -= removed
            self._decisions.clear()
            self._save()
        return matched

    def replace(self, bindings: set[AclBinding]) -> None:
        """Every binding at once, from elsewhere (a cluster's metadata): not written to this broker's file."""
        self.bindings = set(bindings)
        self._decisions.clear()

    def describe(self, f: AclFilter) -> list[AclBinding]:
        return sorted(b for b in self.bindings if f.matches(b))

    def _save(self) -> None:
        write_json_atomically(self.path, [asdict(b) for b in sorted(self.bindings)], private=True)
