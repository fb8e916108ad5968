"""A consume-transform-produce processor with Kafka transactions, as its own process (a test kills it -9).

usage: txn_processor.py BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID
Reads SOURCE in GROUP (read_committed), writes "out-<value>" to SINK in the partition it came from, and
commits the output with the input offsets in one transaction per poll, until killed. Prints "open"
once a transaction's output is on the broker and "committed N" once it is committed.
"""

import sys

from confluent_kafka import Consumer, Producer


def main() -> None:
    bootstrap, source, sink, group, transactional_id = sys.argv[1:6]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "log_level": 0,
                         # static membership (KIP-345), as a restarted service's: the successor takes the killed
                         # one's place at its JoinGroup, not after its session has run out
                         "group.instance.id": transactional_id})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 10000, "linger.ms": 5, "log_level": 0})
    producer.init_transactions(30)  # fences a killed predecessor and aborts what it left open
    consumer.subscribe([source])
    while True:
        batch = [m for m in consumer.consume(200, 0.5) if m.error() is None]
        if not batch:
            continue
        producer.begin_transaction()
        for m in batch:
            producer.produce(sink, b"out-" + m.value(), partition=m.partition())
        producer.flush(30)
        print("open", flush=True)  # the output is on the broker, its transaction not yet committed
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        print("committed", len(batch), flush=True)


if __name__ == "__main__":
    main()
