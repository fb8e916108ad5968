"""A share group's details as the console shows them: its own configs (lock duration, delivery count limit), its
members, and per partition the records in flight, to redeliver, acknowledged and archived, how often the
unfinished ones were delivered, and the backlog."""

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from fastapi.testclient import TestClient

from freshet.client.queue import set_group_configs
from freshet.dashboard.app import create_app
from freshet.dashboard.collector import Collector
from freshet.testing.polling import wait_for
from freshet.testing.topics import create_topic

TOPIC, GROUP = "dash-share-details", "dash-share-workers"


def take(worker, at_least: int) -> list:
    taken: list = []
    wait_for(lambda: taken.extend(m for m in worker.poll(0.5) if m.error() is None) or len(taken) >= at_least, 60,
             f"{at_least} records from the queue")
    return taken


def test_share_group_details_with_configs_members_and_delivery_counts(broker):
    create_topic(broker.bootstrap, TOPIC, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        producer.produce(TOPIC, b"job-%d" % i)
    producer.flush(10)
    set_group_configs(broker.bootstrap, GROUP, {"share.auto.offset.reset": "earliest",
                                                "share.delivery.count.limit": "3",
                                                "share.record.lock.duration.ms": "60000"})
    worker = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "log_level": 3,
                            "client.id": "dash-share-worker", "share.acknowledgement.mode": "explicit",
                            "max.poll.records": 10})
    worker.subscribe([TOPIC])
    try:
        first = take(worker, 10)[:10]
        assert [m.offset() for m in first] == list(range(10))
        kinds = [AcknowledgeType.ACCEPT] * 3 + [AcknowledgeType.RELEASE] * 4 + [AcknowledgeType.REJECT] * 3
        for m, kind in zip(first, kinds):
            worker.acknowledge(m, kind)
        worker.commit_sync(10)
        again = take(worker, 4)  # the four released come back (delivered twice now), maybe with new ones
        redelivered = sorted(m.offset() for m in again if m.offset() < 10)
        fresh = [m for m in again if m.offset() >= 10]
        assert redelivered == [3, 4, 5, 6]
        collector = Collector(broker.bootstrap)
        client = TestClient(create_app(collector))

        def shown() -> dict:
            collector.collect()
            return client.get(f"/api/groups/{GROUP}").json()

        expected_deliveries = {"2": 4, **({"1": len(fresh)} if fresh else {})}
        wait_for(lambda: shown().get("partitions", [{}])[0].get("deliveries") == expected_deliveries, 60,
                 "the in-flight records in the group's state")
        g = shown()
        assert g["type"] == "share" and g["state"] == "Stable"
        assert g["configs"]["share.delivery.count.limit"] == "3"
        assert g["configs"]["share.record.lock.duration.ms"] == "60000"
        [member] = g["members"]
        assert member["client_id"] == "dash-share-worker" and member["subscribed"] == [TOPIC] and member["epoch"] >= 1
        [p] = g["partitions"]
        assert (p["start_offset"], p["acquired"], p["available"], p["acknowledged"], p["archived"], p["redelivered"]) \
            == (3, 4 + len(fresh), 0, 0, 3, 4)
        assert p["backlog"] == 30 - 3 - 3  # accepted and rejected are done; everything else is not
    finally:
        worker.close()
