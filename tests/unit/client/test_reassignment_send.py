"""ReassignmentAdmin sends its two APIs to any broker; the one kafka-python picks may be a broker that just went
down (the metadata still names it until its session ends). Its request is then sent to another broker, as Kafka's
admin client does, and only when every known broker refused (or the request named its broker) is the error the
caller's. The manager is a stand-in whose connections to the named nodes are refused."""

import pytest
from kafka.errors import KafkaConnectionError

from freshet.client.errors import ClientError
from freshet.client.reassignment import ReassignmentAdmin


class StandInManager:
    def __init__(self, down: set[int], brokers: list[int]) -> None:
        self.down, self.sent = down, []
        self._order = list(brokers)
        self.cluster = type("Cluster", (), {"brokers": lambda _self: list(brokers)})()

    async def send(self, request, node_id=None):
        if node_id is None:  # kafka-python's least loaded node: a refused one waits out its backoff
            node_id = next((n for n in self._order if n not in {s for s, _ in self.sent if s in self.down}),
                           self._order[0])
        self.sent.append((node_id, request))
        if node_id in self.down:
            raise KafkaConnectionError("111 ECONNREFUSED")
        return f"answer of {node_id}"

    def run(self, coro_fn):
        import asyncio

        return asyncio.run(coro_fn())


def admin_with(manager: StandInManager) -> ReassignmentAdmin:
    admin = ReassignmentAdmin("127.0.0.1:9")
    admin._admin = type("Admin", (), {"_manager": manager})()
    return admin


def test_a_request_to_any_broker_goes_to_another_when_the_first_is_down():
    manager = StandInManager(down={1}, brokers=[1, 2, 3])
    assert admin_with(manager)._send("req") == "answer of 2"
    assert [n for n, _ in manager.sent] == [1, 2]


def test_every_broker_down_is_the_callers_error_and_a_named_broker_is_not_replaced():
    manager = StandInManager(down={1, 2, 3}, brokers=[1, 2, 3])
    with pytest.raises(ClientError, match="ECONNREFUSED"):
        admin_with(manager)._send("req")
    named = StandInManager(down={2}, brokers=[1, 2, 3])
    with pytest.raises(ClientError, match="ECONNREFUSED"):
        admin_with(named)._send("req", node_id=2)
    assert [n for n, _ in named.sent] == [2]
