"""A stop request the log did not take is an error, not "asked to stop"."""

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.client.errors import ClientError
from freshet.client.pipeline_registry import CONTROL_TOPIC, request_stop


def test_a_stop_request_the_broker_refuses_raises_a_client_error(own_broker):
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    # a control topic that takes no record of a stop request's size: the write is refused
    admin.create_topics([NewTopic(CONTROL_TOPIC, 1, 1, config={"max.message.bytes": "16"})])[CONTROL_TOPIC].result(30)
    with pytest.raises(ClientError, match="stop request for 'p1' was refused"):
        request_stop(own_broker.bootstrap, "p1")
