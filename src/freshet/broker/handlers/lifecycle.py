"""UnregisterBroker (64, v0): a broker that left the cluster for good is removed from the metadata, as
``kafka-cluster.sh unregister --id N`` and Kafka's ``Admin.unregisterBroker`` do (KIP-631). ALTER on the cluster
is needed (CLUSTER_AUTHORIZATION_FAILED); the controller answers BROKER_ID_NOT_REGISTERED for an unknown id. A
broker still running registers again at its next heartbeat, as Kafka's would: stop it first (``freshet cluster
decommission`` moves its replicas away, stops it, then unregisters it). The one-node broker is in no cluster:
INVALID_REQUEST."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ..context import Request, RequestContext, Response
from ..security.acls import ALTER, CLUSTER, CLUSTER_NAME


def unregister_broker(ctx: RequestContext, request: Request) -> Response:
    broker = ctx.broker
    if not ctx.allowed(ALTER, CLUSTER, CLUSTER_NAME):
        return _answer(ErrorCode.cluster_authorization_failed, "ALTER on the cluster is needed")
    if broker.cluster is None:
        return _answer(ErrorCode.invalid_request, "this broker is not in a cluster (started without --controller)")

    async def run() -> dict:
        answer = await broker.cluster.command({"command": "UnregisterBroker", "broker_id": int(request.broker_id)})
        if answer["error"] != "NONE":
            return _answer(ErrorCode(answer["error_code"]), answer["message"] or None)
        gone = int(request.broker_id)
        await broker.cluster.wait_for(lambda view: gone not in view.brokers)
        return _answer(ErrorCode.none, None)

    return run()


def _answer(code: ErrorCode, message: str | None) -> dict:
    return {"throttle_time": 0, "error_code": code, "error_message": message}


APIS = {
    64: (0, 0, unregister_broker),
}
