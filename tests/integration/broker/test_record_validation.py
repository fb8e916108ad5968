"""The produce path walks every record of every batch (freshet.format.record_batch.scan_records): what confluent-kafka
(librdkafka) writes, with headers, null keys and values, in each codec, is still accepted on a plain and on a
timestamp-bounded topic, and reads back as sent."""

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 300


def test_confluent_kafka_batches_in_every_codec_are_accepted_and_read_back(broker, topic_name):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = {f"{topic_name}-plain": {}, f"{topic_name}-bounded": {"message.timestamp.before.max.ms": "3600000"}}
    for name, config in topics.items():
        admin.create_topics([NewTopic(name, 1, config=config)])[name].result(10)
    sent = []
    failures = []
    for codec in CODECS:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 20,
                             "enable.idempotence": True})
        for i in range(PER_CODEC):
            key = None if i % 3 == 0 else f"{codec}-{i}".encode()
            value = None if i % 7 == 0 else (f"{codec} value {i} " * (1 + i % 5)).encode()
            headers = [("trace", f"{i}".encode()), ("empty", None)] if i % 2 else None
            sent.append((key, value, [("trace", f"{i}".encode()), ("empty", None)] if i % 2 else None))
            for topic in topics:
                producer.produce(topic, value=value, key=key, headers=headers,
                                 on_delivery=lambda err, _msg: failures.append(err) if err else None)
        assert producer.flush(30) == 0
    assert failures == []
    for topic in topics:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-reader",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1):
                assert msg.error() is None
                got.append((msg.key(), msg.value(), msg.headers()))
        consumer.close()
        assert got == sent, topic
