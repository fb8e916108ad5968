"""DescribeClientQuotas and AlterClientQuotas (KIP-546): client quotas set and read at run time."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ..cluster import admin as cluster_admin
from ..context import Request, RequestContext, Response
from ..quotas import QuotaError, entity_key
from ..security.acls import ALTER_CONFIGS, CLUSTER, CLUSTER_NAME, DESCRIBE_CONFIGS


def _entity_out(entity) -> list[dict]:
    return [{"entity_type": t, "entity_name": n} for t, n in entity]


def describe_client_quotas(ctx: RequestContext, request: Request) -> dict:
    if not ctx.allowed(DESCRIBE_CONFIGS, CLUSTER, CLUSTER_NAME):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "error_message": "not authorized to describe client quotas", "entries": None}
    try:
        found = ctx.broker.quotas.describe([(c.entity_type, c.match_type, c.match) for c in request.components],
                                           request.strict)
    except QuotaError as exc:
        return {"throttle_time": 0, "error_code": exc.error_code, "error_message": str(exc), "entries": None}
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "entries": [
        {"entity": _entity_out(entity), "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
        for entity, values in found]}


def alter_client_quotas(ctx: RequestContext, request: Request) -> Response:
    """Each entry is checked on its own and answered with its own error; the valid ones are applied together
    (unless ``validate_only``), persisted before the answer, in force at once."""
    quotas = ctx.broker.quotas
    allowed = ctx.allowed(ALTER_CONFIGS, CLUSTER, CLUSTER_NAME)
    results, changes, by_entity = [], {}, {}
    for entry in request.entries:
        raw = [(e.entity_type, e.entity_name) for e in entry.entity]
        result = {"error_code": ErrorCode.none, "error_message": None, "entity": _entity_out(raw)}
        results.append(result)
        try:
            if not allowed:
                raise QuotaError(ErrorCode.cluster_authorization_failed, "not authorized to alter client quotas")
            entity = entity_key(raw)
            if entity in changes:
                raise QuotaError(ErrorCode.invalid_request, "the same entity appears twice in the request")
            changes[entity] = quotas.check_ops(entity, [(op.key, op.value, op.remove) for op in entry.ops])
            by_entity[entity] = result
        except QuotaError as exc:
            result.update(error_code=exc.error_code, error_message=str(exc))
    body = {"throttle_time": 0, "entries": results}
    if changes and not request.validate_only and ctx.broker.cluster is not None:  # the cluster's: the controller
        async def in_cluster() -> dict:
            refused = await cluster_admin.alter_client_quotas(ctx.broker, changes)
            for entity, exc in refused.items():
                by_entity[entity].update(error_code=exc.error_code, error_message=str(exc))
            return body

        return in_cluster()
    if changes and not request.validate_only:
        quotas.alter(changes)
    return body


APIS = {
    48: (0, 1, describe_client_quotas),
    49: (0, 1, alter_client_quotas),
}
