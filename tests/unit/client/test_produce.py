"""``flush_delivered``: a flush that does not wait for librdkafka's 500 ms producer-id timer, and still tells
what was not delivered."""

from confluent_kafka import Producer

from freshet.client.config import producer_config
from freshet.client.produce import flush_delivered
from freshet.local.broker import free_port


def test_with_no_broker_it_returns_the_records_left_instead_of_raising():
    producer = Producer(producer_config(f"127.0.0.1:{free_port()}", {"log_level": 0, "message.timeout.ms": 600000}))
    reports = []
    producer.produce("nowhere", b"value", on_delivery=lambda err, _m: reports.append(err))
    # its metadata requests find no broker (list_topics raises): the flush goes on to its deadline
    assert flush_delivered(producer, "nowhere", 2.0) == 1
    assert reports == []
    producer.purge()
    producer.flush(5)
    assert len(reports) == 1 and reports[0] is not None
