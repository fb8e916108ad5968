"""End to end, real processes (three controllers, three brokers: freshet.local.cluster.LocalCluster): an
idempotent acks=all producer writes while the partition's leader is killed -9 over and over and restarted; every
acknowledged record is there once, in the order written, a consumer reading all along goes on through every
leader change, and the restarted broker rejoins the ISR each time."""

import os
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.local.cluster import LocalCluster

# three kills: leadership moves three times under the writer and the reader, each time to a replica that came back
# and caught up. The soak-length run (20 kills or more) is benchmarks/leader_kill_soak.py, the same test with
# FRESHET_LEADER_KILLS set.
KILLS = int(os.environ.get("FRESHET_LEADER_KILLS", "3"))
DEADLINE = 120.0  # generous: two cores shared by many test runs


class Writer(threading.Thread):
    """Numbers 0, 1, 2, ... as records, idempotent and acks=all, until stopped; what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "log_level": 3})
        self.topic = topic
        self.acked: list[int] = []
        self.errors: list[str] = []
        self.sent = 0
        self.done = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked.append(int(msg.value()))
        else:
            self.errors.append(str(err))

    def run(self) -> None:
        while not self.done.is_set():
            try:
                self.producer.produce(self.topic, str(self.sent).encode(), on_delivery=self._delivered)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.001 if self.sent % 50 else 0.02)
        self.producer.flush(DEADLINE)

    def finish(self) -> None:
        self.done.set()
        self.join(DEADLINE)

    def acked_past(self, count: int, timeout: float = DEADLINE) -> None:
        end = time.monotonic() + timeout
        while len(self.acked) < count:
            assert time.monotonic() < end, f"only {len(self.acked)} records acknowledged, waiting for {count}"
            assert not self.errors, self.errors[:3]
            time.sleep(0.05)


class Reader(threading.Thread):
    """A consumer reading the partition from offset 0 all along, through the leader changes."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                                  "enable.auto.commit": False, "auto.offset.reset": "error", "log_level": 3})
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.got: list[int] = []
        self.errors: list[str] = []
        self.until = 0  # stop once this many were read (0: not yet asked to stop)
        self.give_up = threading.Event()

    def run(self) -> None:
        try:
            while not self.give_up.is_set() and not (self.until and len(self.got) >= self.until):
                m = self.consumer.poll(0.2)
                if m is None:
                    continue
                if m.error():
                    if m.error().fatal() or "offset" in str(m.error()).lower():
                        self.errors.append(str(m.error()))
                    continue
                self.got.append(int(m.value()))
        finally:
            self.consumer.close()


def three_replicas(cluster: LocalCluster, topic: str):
    """A one-partition topic with three replicas and min.insync.replicas=2, once its ISR is whole: a predicate on
    the metadata for a whole ISR (the partition when true), and the partition."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(60)

    def full_isr(metadata):
        part = cluster.partition(topic, 0, metadata)
        return part is not None and part["leader"] >= 0 and len(part["isr"]) == 3 and part

    return full_isr, cluster.wait_until(full_isr, DEADLINE, "a leader and three replicas in the ISR")


def read_all(bootstrap: str, topic: str, count: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e-check", "enable.auto.commit": False,
                        "log_level": 3})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[int] = []
    end = time.monotonic() + DEADLINE
    try:
        while len(got) < count and time.monotonic() < end:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(int(m.value()))
        while (m := consumer.poll(1.0)) is not None:  # anything past what was acknowledged, too
            if not m.error():
                got.append(int(m.value()))
    finally:
        consumer.close()
    return got


@pytest.mark.timeout(1500)
def test_no_acknowledged_record_is_lost_or_duplicated_while_the_leader_is_killed_9_over_and_over(tmp_path):
    with LocalCluster(3, directory=str(tmp_path / "cluster")) as cluster:
        full_isr, part = three_replicas(cluster, "kills")
        writer = Writer(cluster.bootstrap, "kills")
        writer.start()
        reader = Reader(cluster.bootstrap, "kills")
        reader.start()
        try:
            epochs = []
            for _ in range(KILLS):
                writer.acked_past(len(writer.acked) + 200)  # acknowledged writes under this leader
                part = cluster.wait_until(full_isr, DEADLINE, "the restarted broker back in the ISR")
                cluster.kill(part["leader"])
                moved = cluster.wait_until(
                    lambda m: (p := cluster.partition("kills", 0, m))["leader"] not in (-1, part["leader"]) and p,
                    DEADLINE, "a new leader from the ISR")
                assert moved["leader"] in part["isr"] and moved["leader_epoch"] > part["leader_epoch"]
                epochs.append(moved["leader_epoch"])
                writer.acked_past(len(writer.acked) + 200)  # the producer goes on with the new leader
                cluster.restart(part["leader"])
            cluster.wait_until(full_isr, DEADLINE, "all three replicas in the ISR at the end")
        finally:
            writer.finish()
        assert not writer.errors, writer.errors[:3]
        reader.until = len(writer.acked)
        reader.join(DEADLINE)
        reader.give_up.set()
        # the consumer went on through every leader change: no reset (auto.offset.reset=error), nothing twice
        assert not reader.errors, reader.errors[:3]
        assert reader.got == sorted(set(reader.got)) and set(writer.acked) <= set(reader.got)
        assert epochs == sorted(epochs) and len(epochs) == KILLS
        got = read_all(cluster.bootstrap, "kills", len(writer.acked))
        assert len(got) == len(set(got)), "a record was written twice"
        assert got == sorted(got), "records out of the order they were written in"
        missing = set(writer.acked) - set(got)
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
        assert len(writer.acked) >= 400 * KILLS


@pytest.mark.timeout(900)
def test_a_wiped_follower_fetches_the_whole_log_again_and_can_lead_with_it(tmp_path):
    """A follower restarted on an empty data directory (a replaced disk) fetches the whole log from the leader and
    rejoins the ISR; left the only broker alive, it leads and serves every acknowledged record."""
    with LocalCluster(3, directory=str(tmp_path / "cluster")) as cluster:
        full_isr, part = three_replicas(cluster, "wiped")
        writer = Writer(cluster.bootstrap, "wiped")
        writer.start()
        try:
            writer.acked_past(1000)
            wiped = next(n for n in part["replicas"] if n != part["leader"])
            cluster.kill(wiped)
            cluster.wipe(wiped)
            writer.acked_past(len(writer.acked) + 500)  # written while it is away
            cluster.restart(wiped)
            writer.acked_past(len(writer.acked) + 500)
            cluster.wait_until(full_isr, DEADLINE, "the wiped broker back in the ISR")
        finally:
            writer.finish()
        assert not writer.errors, writer.errors[:3]
        cluster.wait_until(full_isr, DEADLINE, "every replica in the ISR after the last write")
        for other in [n for n in part["replicas"] if n != wiped]:
            cluster.kill(other)
            cluster.wait_until(lambda m: other not in cluster.partition("wiped", 0, m)["isr"], DEADLINE,
                               f"broker {other} out of the ISR")
        assert cluster.wait_until(lambda m: cluster.partition("wiped", 0, m)["leader"] == wiped, DEADLINE,
                                  "the wiped broker leading")
        got = read_all(cluster.bootstrap_of(wiped), "wiped", len(writer.acked))
        assert len(got) == len(set(got)) and got == sorted(got)
        missing = set(writer.acked) - set(got)
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"


@pytest.mark.timeout(900)
def test_a_leader_paused_past_its_session_is_deposed_and_keeps_no_divergent_history(tmp_path):
    """SIGSTOP of the leader past the session timeout: a new leader is elected and the producer goes on there;
    the old leader, resumed, still believes it leads until the metadata reaches it, and whatever it took in that
    moment is cut when it follows. Nothing acknowledged is lost or doubled."""
    with LocalCluster(3, directory=str(tmp_path / "cluster"), session_timeout_ms=3000) as cluster:
        full_isr, part = three_replicas(cluster, "paused")
        writer = Writer(cluster.bootstrap, "paused")
        writer.start()
        try:
            writer.acked_past(500)
            cluster.pause(part["leader"])
            try:
                cluster.wait_until(lambda m: cluster.partition("paused", 0, m)["leader"] not in (-1, part["leader"]),
                                   DEADLINE, "a new leader while the old one is paused")
                writer.acked_past(len(writer.acked) + 500)
            finally:
                cluster.resume(part["leader"])
            writer.acked_past(len(writer.acked) + 500)
            cluster.wait_until(full_isr, DEADLINE, "the resumed broker back in the ISR")
        finally:
            writer.finish()
        assert not writer.errors, writer.errors[:3]
        got = read_all(cluster.bootstrap, "paused", len(writer.acked))
        assert len(got) == len(set(got)) and got == sorted(got)
        assert not set(writer.acked) - set(got)
