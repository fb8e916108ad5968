"""SaslHandshake, SaslAuthenticate; DescribeUserScramCredentials, AlterUserScramCredentials; CreateAcls,
DescribeAcls, DeleteAcls."""

from __future__ import annotations

import asyncio
import logging
import time

from kio.schema.errors import ErrorCode

from ..cluster import admin as cluster_admin
from ..context import Request, RequestContext, Response
from ..security.acls import ALTER, CLUSTER, CLUSTER_NAME, DESCRIBE, AclBinding, AclError, AclFilter
from ..security.credentials import MAX_ITERATIONS, MECHANISMS, MECHANISM_IDS, MIN_ITERATIONS, ScramCredential
from ..security.sasl import AuthenticationFailed
from ..topics.registry import TopicError

log = logging.getLogger(__name__)


# -- SASL --------------------------------------------------------------------------------------

def sasl_handshake(ctx: RequestContext, request: Request) -> dict:
    connection = ctx.connection
    sasl = connection.sasl if connection else None
    if sasl is None:  # not a SASL listener
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}
    if not sasl.handshake(request.mechanism):
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": list(sasl.enabled)}
    return {"error_code": ErrorCode.none, "mechanisms": list(sasl.enabled)}


def sasl_authenticate(ctx: RequestContext, request: Request) -> Response:
    broker = ctx.broker
    connection = ctx.connection
    sasl = connection.sasl if connection else None
    body = {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": b"", "session_lifetime": 0}
    if sasl is None or sasl.mechanism is None:
        connection_close(ctx)
        return {**body, "error_code": ErrorCode.illegal_sasl_state,
                "error_message": "SaslAuthenticate before a SaslHandshake"}
    host = connection.peer_host
    try:
        answer, complete = sasl.authenticate(bytes(request.auth_bytes))
    except AuthenticationFailed as exc:
        user = sasl.attempted_user
        if broker.failed_logins.blocked(host, user):
            log.debug("refused an authentication of %s from %s: too many failed attempts", user, host)
            return _refuse(ctx, body, "too many failed authentication attempts; try again later")
        if broker.failed_logins.failed(host, user):
            log.warning("authentication of %s failed from %s: %s; its attempts from there are refused for %.0f s",
                        user, host, exc, broker.failed_logins.window_s)
        else:
            log.info("authentication of %s failed from %s: %s", user, host, exc)
        return _refuse(ctx, body, str(exc))
    if complete and broker.failed_logins.blocked(host, sasl.attempted_user):
        # the right password, but this user is locked out from here for now: the same answer as a wrong one
        sasl.principal = None
        return _refuse(ctx, body, "too many failed authentication attempts; try again later")
    body["auth_bytes"] = answer
    if complete:
        reauth_ms = broker.config.security.reauth_ms
        sasl.expires_at = time.monotonic() + reauth_ms / 1000 if reauth_ms > 0 else None
        body["session_lifetime"] = reauth_ms
    return body


FAILED_AUTHENTICATION_DELAY_S = 0.1  # Kafka's connection.failed.authentication.delay.ms


async def _after_delay(body: dict) -> dict:
    """A failed authentication is answered late: guessing passwords gets slower (as Kafka does)."""
    await asyncio.sleep(FAILED_AUTHENTICATION_DELAY_S)
    return body


def _refuse(ctx: RequestContext, body: dict, message: str) -> Response:
    connection_close(ctx)
    return _after_delay({**body, "error_code": ErrorCode.sasl_authentication_failed, "error_message": message})


def connection_close(ctx: RequestContext) -> None:
    if ctx.connection is not None:
        ctx.connection.close_after_response = True


# -- SCRAM credentials -----------------------------------------------------------------------------

CLUSTER_AUTHORIZATION_FAILED = "Cluster authorization failed."  # Kafka's message for the refusal


def describe_user_scram_credentials(ctx: RequestContext, request: Request) -> dict:
    if not ctx.allowed(DESCRIBE, CLUSTER, CLUSTER_NAME):  # as Kafka: the refusal, and again for each user named
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "error_message": CLUSTER_AUTHORIZATION_FAILED, "results": [
                    {"user": u.name, "error_code": ErrorCode.cluster_authorization_failed,
                     "error_message": CLUSTER_AUTHORIZATION_FAILED, "credential_infos": []}
                    for u in request.users or ()]}
    store = ctx.broker.credentials
    names = sorted(store.users) if not request.users else [u.name for u in request.users]  # null or empty: all
    results = []
    seen = set()
    for name in names:
        if name in seen:
            results.append({"user": name, "error_code": ErrorCode.duplicate_resource,
                            "error_message": "user named twice", "credential_infos": []})
            continue
        seen.add(name)
        credentials = store.any_for(name)
        if not credentials:
            results.append({"user": name, "error_code": ErrorCode.resource_not_found,
                            "error_message": f"no SCRAM credentials for {name!r}", "credential_infos": []})
            continue
        results.append({"user": name, "error_code": ErrorCode.none, "error_message": None, "credential_infos": [
            {"mechanism": MECHANISM_IDS[c.mechanism], "iterations": c.iterations} for c in credentials]})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "results": results}


def _credential_refusal(allowed: bool, name: str, mechanism: int, times_named: int) -> tuple[ErrorCode, str] | None:
    """What deletions and upsertions alike are refused for (None: nothing)."""
    if not allowed:
        return ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED
    if not name:
        return ErrorCode.unacceptable_credential, "the user name must not be empty"
    if mechanism not in MECHANISMS:
        return ErrorCode.unsupported_sasl_mechanism, f"unknown SCRAM mechanism {mechanism}"
    if times_named > 1:
        return ErrorCode.duplicate_resource, "a user's mechanism named twice in one request"
    return None


def alter_user_scram_credentials(ctx: RequestContext, request: Request) -> Response:
    store = ctx.broker.credentials
    allowed = ctx.allowed(ALTER, CLUSTER, CLUSTER_NAME)
    errors: dict[str, tuple[ErrorCode, str]] = {}
    order: list[str] = []
    touched: dict[tuple[str, int], int] = {}
    for item in (*request.deletions, *request.upsertions):
        if item.name not in order:
            order.append(item.name)
        touched[(item.name, item.mechanism)] = touched.get((item.name, item.mechanism), 0) + 1
    upserts, deletes = [], []
    for d in request.deletions:
        refusal = _credential_refusal(allowed, d.name, d.mechanism, touched[(d.name, d.mechanism)])
        if d.name in errors:
            continue
        if refusal is not None:
            errors[d.name] = refusal
        elif store.get(d.name, MECHANISMS[d.mechanism]) is None:
            errors[d.name] = (ErrorCode.resource_not_found, f"{d.name!r} has no {MECHANISMS[d.mechanism]} credential")
        else:
            deletes.append((d.name, MECHANISMS[d.mechanism]))
    for u in request.upsertions:
        refusal = _credential_refusal(allowed, u.name, u.mechanism, touched[(u.name, u.mechanism)])
        if u.name in errors:
            continue
        if refusal is not None:
            errors[u.name] = refusal
        elif not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
            errors[u.name] = (ErrorCode.unacceptable_credential,
                              f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, not {u.iterations}")
        elif not u.salt or not u.salted_password:
            errors[u.name] = (ErrorCode.unacceptable_credential, "salt and salted password must not be empty")
        else:
            upserts.append((u.name, ScramCredential.from_salted_password(
                MECHANISMS[u.mechanism], bytes(u.salt), u.iterations, bytes(u.salted_password))))
    # a user with any error changes nothing at all
    upserts = [(n, c) for n, c in upserts if n not in errors]
    deletes = [(n, m) for n, m in deletes if n not in errors]

    def answer() -> dict:
        return {"throttle_time": 0, "results": [
            {"user": name, "error_code": errors.get(name, (ErrorCode.none, ""))[0],
             "error_message": errors.get(name, (None, None))[1] or None} for name in order]}

    if (upserts or deletes) and ctx.broker.cluster is not None:  # the cluster's users: through the controller

        async def in_cluster() -> dict:
            refused = await cluster_admin.alter_scram_credentials(ctx.broker, upserts, deletes)
            errors.update({name: (exc.error_code, str(exc)) for name, exc in refused.items()})
            return answer()

        return in_cluster()
    if upserts or deletes:
        store.apply(upserts, deletes)
    return answer()


# -- ACLs ------------------------------------------------------------------------------------------

# Kafka's SECURITY_DISABLED message, and how to turn the authorizer on here
_DISABLED = "No Authorizer is configured on the broker (freshet broker start --authorizer)"


def create_acls(ctx: RequestContext, request: Request) -> Response:
    authorizer = ctx.broker.authorizer
    results = []
    bindings = []
    for c in request.creations:
        if authorizer is None:
            results.append({"error_code": ErrorCode.security_disabled, "error_message": _DISABLED})
            continue
        if not ctx.allowed(ALTER, CLUSTER, CLUSTER_NAME):
            results.append({"error_code": ErrorCode.cluster_authorization_failed, "error_message": None})
            continue
        binding = AclBinding(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                             c.operation, c.permission_type)
        try:
            binding.validate()
        except AclError as exc:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": str(exc)})
            continue
        bindings.append(binding)
        results.append({"error_code": ErrorCode.none, "error_message": None})
    body = {"throttle_time": 0, "results": results}
    if bindings and ctx.broker.cluster is not None:  # a cluster's ACLs are its metadata (issue #46)
        return _in_cluster(cluster_admin.create_acls(ctx.broker, bindings), body, results)
    if bindings:
        authorizer.create(bindings)
    return body


async def _in_cluster(change, body: dict, results: list[dict]) -> dict:
    """``body`` once the controller has the change; its refusal (or none reached) is every result's error."""
    try:
        await change
    except TopicError as exc:
        for result in results:
            if result["error_code"] == ErrorCode.none:
                result.update(error_code=exc.error_code, error_message=str(exc))
    return body


def _filter(f) -> AclFilter:
    """A DescribeAcls request or a DeleteAcls filter as an AclFilter (they share the field names)."""
    return AclFilter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
                     f.host_filter, f.operation, f.permission_type)


def describe_acls(ctx: RequestContext, request: Request) -> dict:
    authorizer = ctx.broker.authorizer
    body = {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "resources": []}
    if authorizer is None:
        return {**body, "error_code": ErrorCode.security_disabled, "error_message": _DISABLED}
    if not ctx.allowed(DESCRIBE, CLUSTER, CLUSTER_NAME):
        return {**body, "error_code": ErrorCode.cluster_authorization_failed}
    f = _filter(request)
    try:
        f.validate()
    except AclError as exc:
        return {**body, "error_code": ErrorCode.invalid_request, "error_message": str(exc)}
    grouped: dict[tuple, list] = {}
    for b in authorizer.describe(f):
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            {"principal": b.principal, "host": b.host, "operation": b.operation, "permission_type": b.permission})
    body["resources"] = [{"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
                         for (t, n, p), acls in grouped.items()]
    return body


def delete_acls(ctx: RequestContext, request: Request) -> Response:
    authorizer = ctx.broker.authorizer
    if authorizer is None or not ctx.allowed(ALTER, CLUSTER, CLUSTER_NAME):
        code = ErrorCode.security_disabled if authorizer is None else ErrorCode.cluster_authorization_failed
        return {"throttle_time": 0, "filter_results": [
            {"error_code": code, "error_message": _DISABLED if authorizer is None else None, "matching_acls": []}
            for _ in request.filters]}
    filters, results = [], []
    for f in request.filters:
        acl_filter = _filter(f)
        try:
            acl_filter.validate()
        except AclError as exc:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": str(exc), "matching_acls": []})
            filters.append(None)
            continue
        filters.append(acl_filter)
        results.append(None)
    if ctx.broker.cluster is not None:  # matched against the cluster's ACLs, removed through the controller
        found = [authorizer.describe(f) for f in filters if f is not None]
        change = cluster_admin.delete_acls(ctx.broker, found)
        matched = iter(found)
    else:
        change = None
        matched = iter(authorizer.delete([f for f in filters if f is not None]))
    for i, f in enumerate(filters):
        if f is None:
            continue
        results[i] = {"error_code": ErrorCode.none, "error_message": None, "matching_acls": [
            {"error_code": ErrorCode.none, "error_message": None, "resource_type": b.resource_type,
             "resource_name": b.resource_name, "pattern_type": b.pattern_type, "principal": b.principal,
             "host": b.host, "operation": b.operation, "permission_type": b.permission} for b in next(matched)]}
    body = {"throttle_time": 0, "filter_results": results}
    return _in_cluster(change, body, results) if change is not None else body


APIS = {
    17: (1, 1, sasl_handshake),
    36: (0, 2, sasl_authenticate),
    50: (0, 0, describe_user_scram_credentials),
    51: (0, 0, alter_user_scram_credentials),
    29: (1, 3, describe_acls),
    30: (1, 3, create_acls),
    31: (1, 3, delete_acls),
}
