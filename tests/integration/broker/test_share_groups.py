"""Share groups (KIP-932) with confluent-kafka's ShareConsumer: queues on the log.

Competing consumers beyond the partition count, lock expiry, release / reject / the delivery limit, a consumer
killed -9, the broker killed -9 with records in flight, share and consumer groups side by side."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer

from freshet.client.queue import set_group_configs
from freshet.client.share_groups import describe_share_group
from freshet.testing.polling import wait_for
from freshet.testing.topics import create_topic

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


def produce(bootstrap, topic, count, partitions=1):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        p.produce(topic, str(i).encode(), partition=i % partitions)
    assert p.flush(30) == 0


def share_consumer(bootstrap, group, topic, explicit=True):
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3,
                       "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
    c.subscribe([topic])
    return c


def poll_until(consumer, predicate, timeout=30.0):
    """Poll (without acknowledging) until ``predicate(messages)`` holds for one poll's messages."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msgs = [m for m in consumer.poll(0.5) if m.error() is None]
        if msgs and predicate(msgs):
            return msgs
        for m in msgs:  # not what we wait for: give it back
            consumer.acknowledge(m, RELEASE)
        if msgs:
            consumer.commit_sync(10)
    raise AssertionError("the records never came")


@pytest.fixture
def group(topic_name):
    return f"{topic_name}-queue"


def test_competing_consumers_beyond_the_partition_count_each_record_accepted_once(broker, topic_name, group):
    create_topic(broker.bootstrap, topic_name, 2)
    total = 3000
    produce(broker.bootstrap, topic_name, total, partitions=2)
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    received: list[list[tuple[int, int]]] = [[] for _ in range(4)]
    stop = threading.Event()

    def work(i):
        c = share_consumer(broker.bootstrap, group, topic_name)
        try:
            while not stop.is_set():
                msgs = c.poll(0.5)
                for m in msgs:
                    assert m.error() is None
                    received[i].append((m.partition(), m.offset()))
                    time.sleep(0.0005)  # some work per record, so the queue is shared
                    c.acknowledge(m, ACCEPT)
                if msgs:
                    c.commit_sync(30)
        finally:
            c.close()

    workers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    try:
        wait_for(lambda: sum(map(len, received)) >= total, timeout=60, what="every record consumed")
        time.sleep(1.0)  # anything delivered twice would arrive now
    finally:
        stop.set()
        for w in workers:
            w.join(30)
    everything = [r for got in received for r in got]
    assert len(everything) == total and len(set(everything)) == total  # none lost, none twice
    assert sum(1 for got in received if got) >= 3, [len(g) for g in received]  # 4 consumers, 2 partitions
    info = describe_share_group(broker.bootstrap, group)
    assert [(p.acknowledged + p.archived + p.acquired + p.available, p.backlog) for p in info.partitions] == [(0, 0)] * 2
    assert sorted(p.start_offset for p in info.partitions) == [total // 2, total // 2]


def test_release_reject_and_the_delivery_count_limit(broker, topic_name, group):
    create_topic(broker.bootstrap, topic_name, 1)
    produce(broker.bootstrap, topic_name, 3)
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest",
                                                "share.delivery.count.limit": "3"})
    c = share_consumer(broker.bootstrap, group, topic_name)
    deliveries: dict[int, list[int]] = {0: [], 1: [], 2: []}
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(deliveries[2]) < 3:
            msgs = c.poll(0.5)
            for m in msgs:
                deliveries[m.offset()].append(m.delivery_count())
                c.acknowledge(m, {0: ACCEPT, 1: REJECT, 2: RELEASE}[m.offset()])
            if msgs:
                assert all(v is None for v in c.commit_sync(10).values())
        assert [m.offset() for m in c.poll(2.0)] == []  # released three times: archived, nothing left
    finally:
        c.close()
    assert deliveries == {0: [1], 1: [1], 2: [1, 2, 3]}
    info = describe_share_group(broker.bootstrap, group)
    assert info.partitions[0].start_offset == 3 and info.partitions[0].backlog == 0


def test_an_expired_lock_lets_another_consumer_have_the_records(broker, topic_name, group):
    create_topic(broker.bootstrap, topic_name, 1)
    produce(broker.bootstrap, topic_name, 5)
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest",
                                                "share.record.lock.duration.ms": "1000"})
    slow = share_consumer(broker.bootstrap, group, topic_name)
    quick = share_consumer(broker.bootstrap, group, topic_name)
    try:
        held = poll_until(slow, lambda msgs: len(msgs) == 5)
        assert [m.delivery_count() for m in held] == [1] * 5
        again = poll_until(quick, lambda msgs: len(msgs) == 5)
        assert [(m.offset(), m.delivery_count()) for m in again] == [(o, 2) for o in range(5)]
        for m in again:
            quick.acknowledge(m, ACCEPT)
        assert all(v is None for v in quick.commit_sync(10).values())
        for m in held:  # too late: the records are no longer the slow consumer's
            slow.acknowledge(m, ACCEPT)
        results = slow.commit_sync(10)
        assert results and all(v is not None for v in results.values())
    finally:
        slow.close()
        quick.close()


CRASHING_CONSUMER = """
import sys, time
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
while True:
    msgs = c.poll(0.5)
    if msgs:
        print(len(msgs), flush=True)
        break
time.sleep(600)
"""


def test_records_of_a_consumer_killed_mid_stream_come_back_to_the_others(broker, topic_name, group):
    create_topic(broker.bootstrap, topic_name, 1)
    produce(broker.bootstrap, topic_name, 20)
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest",
                                                "share.session.timeout.ms": "2000",
                                                "share.heartbeat.interval.ms": "500",
                                                "share.record.lock.duration.ms": "600000"})
    proc = subprocess.Popen([sys.executable, "-c", CRASHING_CONSUMER, broker.bootstrap, group, topic_name],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert int(proc.stdout.readline()) == 20  # it holds every record, unacknowledged
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    survivor = share_consumer(broker.bootstrap, group, topic_name)
    try:
        got = poll_until(survivor, lambda msgs: True, timeout=30)  # long before the 10-minute lock
        assert [m.delivery_count() for m in got] == [2] * len(got)
        assert [m.offset() for m in got] == list(range(len(got)))
    finally:
        survivor.close()


def test_after_broker_kill9_acknowledged_records_stay_done_and_in_flight_ones_come_back(own_broker, topic_name, group):
    bootstrap = own_broker.bootstrap
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, 10)
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    c = share_consumer(bootstrap, group, topic_name)
    msgs = poll_until(c, lambda msgs: len(msgs) == 10)
    for m in msgs[:6]:
        c.acknowledge(m, ACCEPT)
    c.acknowledge(msgs[6], REJECT)
    assert all(v is None for v in c.commit_sync(10).values())  # answered only once on disk
    own_broker.kill()  # offsets 7-9 are still acquired by c
    own_broker.start()
    c.close()
    fresh = share_consumer(bootstrap, group, topic_name)
    try:
        got = poll_until(fresh, lambda msgs: True)
        assert [(m.offset(), m.value()) for m in got] == [(7, b"7"), (8, b"8"), (9, b"9")]
        assert [m.delivery_count() for m in got] == [2, 2, 2]  # the count survived the crash
        for m in got:
            fresh.acknowledge(m, ACCEPT)
        fresh.commit_sync(10)
    finally:
        fresh.close()


def test_share_groups_and_consumer_groups_read_one_topic_independently(broker, topic_name, group):
    create_topic(broker.bootstrap, topic_name, 2)
    produce(broker.bootstrap, topic_name, 100, partitions=2)
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{group}-classic",
                        "auto.offset.reset": "earliest", "log_level": 3})
    classic.subscribe([topic_name])
    queue = share_consumer(broker.bootstrap, group, topic_name, explicit=False)
    seen_classic, seen_queue = set(), set()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (len(seen_classic) < 100 or len(seen_queue) < 100):
            m = classic.poll(0.1)
            if m is not None and m.error() is None:
                seen_classic.add((m.partition(), m.offset()))
            for m in queue.poll(0.1):
                seen_queue.add((m.partition(), m.offset()))
        queue.commit_sync(10)
    finally:
        classic.close()
        queue.close()
    assert seen_classic == seen_queue and len(seen_queue) == 100
