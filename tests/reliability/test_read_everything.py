"""freshet.testing.crash.read_everything, which the kill -9 tests read their output topics with: a transactional
topic ends with a commit marker, for which no record is delivered; the read ends there, not at its deadline."""

import pytest
from confluent_kafka import Producer

from freshet.testing.crash import read_everything
from freshet.testing.topics import create_topic


@pytest.mark.timeout(120)  # the old read waited out its whole deadline (here an hour) on such a topic
def test_a_transactional_topic_is_read_to_its_end_and_no_further(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic_name})
    producer.init_transactions(60)
    for i, commit in enumerate((True, False, True)):
        producer.begin_transaction()
        producer.produce(topic_name, f"r{i}".encode(), partition=i % 2)
        (producer.commit_transaction if commit else producer.abort_transaction)(60)
    got = read_everything(broker.bootstrap, topic_name, 2, timeout_s=3600)
    assert got == {0: [b"r0", b"r2"], 1: []}
