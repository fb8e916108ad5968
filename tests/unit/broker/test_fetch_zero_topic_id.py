"""A Fetch v13+ naming a topic by the zero UUID (which kio reads as None) is answered UNKNOWN_TOPIC_ID; the
connection was closed by a crash in the response encoder, which got the None back as the topic id."""

import uuid

from kio.schema.errors import ErrorCode

from freshet.testing.raw_kafka import RawConnection, fetch_body


def test_a_fetch_by_the_zero_topic_id_is_an_unknown_topic_id(broker):
    body = fetch_body("ignored", {0: 0}, 1 << 20, 1 << 20)
    body["topics"][0]["topic_id"] = uuid.UUID(int=0)
    with RawConnection(broker.bootstrap) as conn:
        for version in (13, 16):
            response = conn.request(1, version, body)
            assert response.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id
