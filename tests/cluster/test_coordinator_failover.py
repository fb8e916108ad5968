"""The coordinators move with the leaders of their internal topics (issue #46): ``__transaction_state`` is
replicated, its leader is the transaction coordinator, and a transactional copy job (consume, transform,
produce, ``send_offsets_to_transaction``, commit) stays exactly-once while the coordinator's broker is killed -9:
every input record is in the output once, as a read_committed reader sees it."""

import os
import threading
import time

from freshet.client import TRANSACTIONAL_OFFSETS

from .conftest import DEADLINE, admin
from .test_metadata import created, wait_for

TXN_STATE = "__transaction_state"
# FRESHET_RDKAFKA_DEBUG=eos,protocol,cgrp,broker: the copy job's clients log what they ask and hear (to stderr)
_DEBUG = {"debug": os.environ["FRESHET_RDKAFKA_DEBUG"]} if os.environ.get("FRESHET_RDKAFKA_DEBUG") else {}


class Feeder(threading.Thread):
    """``r-0``, ``r-1``, ... into ``src`` (idempotent, acks=all) until stopped: input keeps arriving while
    brokers die (~50 a second: the property needs a stream, not volume; the job copies the whole of it at the
    end). ``delivered`` counts what was acknowledged."""

    def __init__(self, bootstrap: str, src: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 300000})
        self.src = src
        self.sent = 0
        self.delivered = 0
        self.errors: list[str] = []
        self.stop = threading.Event()

    def _delivered(self, err, _msg) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.errors.append(str(err))

    def run(self) -> None:
        while not self.stop.is_set():
            for _ in range(5):
                self.producer.produce(self.src, f"r-{self.sent}".encode(), partition=self.sent % 3,
                                      on_delivery=self._delivered)
                self.sent += 1
            self.producer.poll(0)
            self.stop.wait(0.1)  # poll(0.1) returns at the first delivery report: the pace would be the log's
        self.producer.flush(300)


class CopyJob(threading.Thread):
    """``src`` -> ``dst`` (the same partition, the value prefixed), one transaction per poll, with the offsets
    committed in the transaction: the loop of Kafka's exactly-once examples, with their error handling (a
    retriable commit is retried, an abortable error aborts and rewinds the consumer to its committed offsets)."""

    def __init__(self, bootstrap: str, src: str, dst: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer, Producer

        self.src, self.dst = src, dst
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "copier", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                                  "session.timeout.ms": 30000, **_DEBUG})
        # TRANSACTIONAL_OFFSETS, as Freshet's own transactional producers: librdkafka 2.16 (#5511, #5456) holds a
        # TxnOffsetCommit for a group coordinator that left the Metadata until a connection goes up or down
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "copy-job", "linger.ms": 5,
                                  "transaction.timeout.ms": 60000, **TRANSACTIONAL_OFFSETS, **_DEBUG})
        self.committed = 0  # transactions committed
        self.copied = 0  # input records whose transaction committed
        self.aborted = 0
        self.target: int | None = None  # stops once this many are copied
        self.failure: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.producer.init_transactions(120)
            self.consumer.subscribe([self.src])
            while (self.target is None or self.copied < self.target) and not self.done.is_set():
                batch = [m for m in self.consumer.consume(40, 0.5) if m.error() is None]
                if batch:
                    self._transaction(batch)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            self.failure = exc
        finally:
            self.done.set()

    def _transaction(self, batch) -> None:
        from confluent_kafka import KafkaException

        try:
            self.producer.begin_transaction()
            for m in batch:
                self.producer.produce(self.dst, b"copy-" + m.value(), partition=m.partition())
            self.producer.send_offsets_to_transaction(self.consumer.position(self.consumer.assignment()),
                                                      self.consumer.consumer_group_metadata(), 120)
            self._commit()
            self.committed += 1
            self.copied += len(batch)
        except KafkaException as exc:
            if not exc.args[0].txn_requires_abort():
                raise
            self.producer.abort_transaction(120)
            self.aborted += 1
            self._rewind()

    def _commit(self) -> None:
        from confluent_kafka import KafkaException

        end = time.monotonic() + DEADLINE
        while True:
            try:
                self.producer.commit_transaction(120)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or time.monotonic() > end:
                    raise

    def _rewind(self) -> None:
        """Back to what the last committed transaction consumed."""
        assignment = self.consumer.assignment()
        for tp in self.consumer.committed(assignment, 60):
            if tp.offset >= 0:
                self.consumer.seek(tp)
            else:
                tp.offset = -2  # OFFSET_BEGINNING: nothing committed yet
                self.consumer.seek(tp)

    def close(self) -> None:
        self.done.set()
        self.join(DEADLINE)
        self.consumer.close()


def _end_txn_on(cluster, node_id: int) -> int:
    """EndTxn straight to broker ``node_id``: its error code."""
    import asyncio

    from freshet.broker.replication.client import BrokerConnection

    async def ask() -> int:
        connection = BrokerConnection("127.0.0.1", cluster.nodes[node_id].port, "probe")
        try:
            answer = await connection.request(26, 1, {"transactional_id": "copy-job", "producer_id": 0,
                                                      "producer_epoch": 0, "committed": True})
        finally:
            connection.close()
        return int(answer.error_code)

    return asyncio.run(ask())


def _read_committed(bootstrap: str, topic: str, expected: int) -> list[str]:
    from confluent_kafka import Consumer

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "isolation.level": "read_committed",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    reader.subscribe([topic])
    seen: list[str] = []
    try:
        def enough():
            for m in reader.consume(500, 0.5):
                if m.error() is None:
                    seen.append(m.value().decode())
            return len(seen) >= expected

        wait_for("the copies", enough, 2 * DEADLINE)
        for m in reader.consume(500, 3):  # nothing more after them (a duplicate would show here)
            if m.error() is None:
                seen.append(m.value().decode())
    finally:
        reader.close()
    return seen


def test_a_transactional_copy_job_stays_exactly_once_while_the_transaction_coordinator_is_killed_9(own_cluster):
    from confluent_kafka.admin import NewTopic

    created(admin(own_cluster.bootstrap), NewTopic("src", 3, 3), NewTopic("dst", 3, 3, config={
        "min.insync.replicas": "2"}))
    feeder = Feeder(own_cluster.bootstrap, "src")
    feeder.start()
    job = CopyJob(own_cluster.bootstrap, "src", "dst")
    job.start()
    try:
        kills = []
        for round_ in range(2):  # the coordinator killed, back, then its successor killed
            wait_for("transactions committed", lambda: job.committed >= 10 * (round_ + 1) or job.done.is_set())
            assert job.failure is None, job.failure
            state = own_cluster.partition(TXN_STATE, 0)
            assert len(state["replicas"]) == 3  # replicated as __consumer_offsets is
            coordinator = state["leader"]
            before = job.committed
            own_cluster.kill(coordinator)
            kills.append((coordinator, before))
            moved = own_cluster.wait_until(lambda m: (p := own_cluster.partition(TXN_STATE, 0, m))["leader"]
                                           not in (-1, coordinator) and p, DEADLINE, "a new transaction coordinator")
            assert moved["leader_epoch"] > state["leader_epoch"]
            own_cluster.restart(coordinator)  # back at once: the next round needs three brokers again
            wait_for("transactions committed through the new coordinator",
                     lambda: job.committed > before + 3 or job.done.is_set())
            assert job.failure is None, job.failure
            own_cluster.wait_until(lambda m: len(own_cluster.partition(TXN_STATE, 0, m)["isr"]) == 3, DEADLINE,
                                   "the restarted broker back in the ISR of __transaction_state")
        feeder.stop.set()
        feeder.join(3 * DEADLINE)
        assert not feeder.errors and feeder.delivered == feeder.sent, (feeder.errors[:3], feeder.delivered)
        job.target = feeder.sent
        wait_for("the job through its input", job.done.is_set, 3 * DEADLINE)
        assert job.failure is None, job.failure
    finally:
        feeder.stop.set()
        job.close()
    assert kills[0][0] != kills[1][0]
    coordinator = own_cluster.partition(TXN_STATE, 0)["leader"]
    assert [_end_txn_on(own_cluster, n) for n in (1, 2, 3) if n != coordinator] == [16, 16]  # NOT_COORDINATOR
    records = feeder.sent
    copies = _read_committed(own_cluster.bootstrap, "dst", records)
    assert len(copies) == records, f"{len(copies) - len(set(copies))} duplicated, {job.aborted} aborted"
    assert sorted(copies) == sorted(f"copy-r-{i}" for i in range(records))


def test_a_share_consumer_gets_every_record_of_partitions_led_by_every_broker_once(tmp_path):
    """Share groups on a cluster (KIP-932): the member heartbeats to the group's coordinator and fetches from each
    partition's leader, which takes it on (before, only the partitions the coordinator led were delivered)."""
    from confluent_kafka import Producer, ShareConsumer
    from confluent_kafka.admin import NewTopic

    from freshet.local.cluster import LocalCluster

    with LocalCluster(3, directory=str(tmp_path / "c"), broker_args=["--share-auto-offset-reset", "earliest"]) as c:
        created(admin(c.bootstrap), NewTopic("queue", 3, 3))
        assert sorted(c.partition("queue", i)["leader"] for i in range(3)) == [1, 2, 3]
        producer = Producer({"bootstrap.servers": c.bootstrap})
        for i in range(300):
            producer.produce("queue", f"job-{i}".encode(), partition=i % 3)
        assert producer.flush(DEADLINE) == 0
        consumer = ShareConsumer({"bootstrap.servers": c.bootstrap, "group.id": "workers",
                                  "share.acknowledgement.mode": "implicit"})
        consumer.subscribe(["queue"])
        seen: list[str] = []
        try:
            def all_delivered():
                seen.extend(m.value().decode() for m in consumer.poll(1.0) if m.error() is None)
                return len(seen) >= 300

            wait_for("every job delivered", all_delivered)
            seen.extend(m.value().decode() for m in consumer.poll(3.0) if m.error() is None)
        finally:
            consumer.close()
        assert sorted(seen) == sorted(f"job-{i}" for i in range(300))
