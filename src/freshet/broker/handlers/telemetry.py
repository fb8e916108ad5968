"""GetTelemetrySubscriptions and PushTelemetry: clients' own metrics (KIP-714)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ..context import Request, RequestContext
from ..telemetry import TelemetryError


def get_telemetry_subscriptions(ctx: RequestContext, request: Request) -> dict:
    connection = ctx.connection
    software = getattr(connection, "client_software", "") if connection else ""
    answer = ctx.broker.telemetry.subscribe(request.client_instance_id, ctx.header.client_id or "",
                                            ctx.peer_host.lstrip("/"), software)
    return {"throttle_time": 0, "error_code": ErrorCode.none, **answer}


def push_telemetry(ctx: RequestContext, request: Request) -> dict:
    try:
        ctx.broker.telemetry.push(request.client_instance_id, request.subscription_id, request.terminating,
                                  request.compression_type, bytes(request.metrics), ctx.header.client_id or "",
                                  ctx.peer_host.lstrip("/"))
    except TelemetryError as exc:
        return {"throttle_time": 0, "error_code": exc.error_code}
    return {"throttle_time": 0, "error_code": ErrorCode.none}


APIS = {
    71: (0, 0, get_telemetry_subscriptions),
    72: (0, 0, push_telemetry),
}
