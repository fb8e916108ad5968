"""End to end, real processes (three controllers, three brokers: freshet.local.cluster.LocalCluster): an
idempotent acks=all producer writes while the partition's leader is killed -9 over and over and restarted; every
acknowledged record is there once, in the order written; a consumer group member (subscribe, read_committed,
commits) reads all along and goes on through every leader change, also when the killed broker was its group's
coordinator; its committed offset ends at the partition's end; the restarted broker rejoins the ISR each time."""

import statistics
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.client.offsets import watermark_offsets
from freshet.local.cluster import LocalCluster

# three kills: leadership moves three times under the writer and the reader, each time to a replica that came back
# and caught up. The soak-length run (20 kills or more) is benchmarks/leader_kill_soak.py, which calls
# kill_the_leader_over_and_over below and prints what it measured.
KILLS = 3
DEADLINE = 120.0  # generous: two cores shared by many test runs


class Writer(threading.Thread):
    """Numbers 0, 1, 2, ... as records, idempotent and acks=all, until stopped; what was acknowledged, and when
    each record was sent and acknowledged (time.monotonic())."""

    def __init__(self, bootstrap: str, topic: str, **config) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "log_level": 3, **config})
        self.topic = topic
        self.acked: list[int] = []
        self.acked_at: list[float] = []
        self.sent_at: list[float] = []
        self.errors: list[str] = []
        self.sent = 0
        self.done = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked.append(int(msg.value()))
            self.acked_at.append(time.monotonic())
        else:
            self.errors.append(str(err))

    def run(self) -> None:
        while not self.done.is_set():
            try:
                self.sent_at.append(time.monotonic())
                self.producer.produce(self.topic, str(self.sent).encode(), on_delivery=self._delivered)
                self.sent += 1
            except BufferError:
                self.sent_at.pop()
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

    def first_ack_after(self, moment: float) -> float | None:
        """Seconds from ``moment`` to the first acknowledgement of a record sent after it."""
        for value, at in zip(self.acked[:], self.acked_at[:]):
            if self.sent_at[value] >= moment:
                return at - moment
        return None


class GroupReader(threading.Thread):
    """A member of a consumer group (subscribe, isolation.level=read_committed, no auto commit: it commits what it
    read after every batch) reading the topic all along, through the leader and coordinator changes. What it read
    as (offset, value); a rewind (an offset read again) is only allowed right after a new assignment (a rebalance
    restarts from the committed offset, as Kafka's consumers do)."""

    def __init__(self, bootstrap: str, topic: str, group: str, protocol: str = "classic") -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                                  "group.protocol": protocol, "log_level": 3})
        self.topic = topic
        self.read: dict[int, int] = {}  # offset -> value
        self.mismatched: list[tuple[int, int, int]] = []  # an offset read again with another value
        self.next = 0  # the offset after the last one read
        self.assignments = 0
        self.rewinds = 0
        self.bad_rewinds: list[tuple[int, int]] = []  # (expected, got) with no assignment in between
        self.errors: list[str] = []
        self.commit_retries = 0
        self.until = -1  # stop once every offset below this was read and committed (-1: not yet asked to stop)
        self.committed_at_end: int | None = None
        self.give_up = threading.Event()
        self._assigned_since = False

    def _on_assign(self, consumer, partitions) -> None:
        self.assignments += 1
        self._assigned_since = True

    def run(self) -> None:
        self.consumer.subscribe([self.topic], on_assign=self._on_assign)
        try:
            while not self.give_up.is_set() and not (0 <= self.until <= self.next):
                batch = self.consumer.consume(500, 0.2)
                for m in batch:
                    if m.error():
                        if m.error().fatal():
                            self.errors.append(str(m.error()))
                        continue
                    if m.offset() != self.next:
                        if m.offset() < self.next and self._assigned_since:
                            self.rewinds += 1
                        else:
                            self.bad_rewinds.append((self.next, m.offset()))
                    self._assigned_since = False
                    value = int(m.value())
                    if self.read.setdefault(m.offset(), value) != value:
                        self.mismatched.append((m.offset(), self.read[m.offset()], value))
                    self.next = m.offset() + 1
                if batch:
                    try:
                        self.consumer.commit(asynchronous=True)
                    except KafkaException:  # nothing to commit, or no coordinator for now: the next batch's
                        pass
            self.committed_at_end = self._commit_until_stored()
        finally:
            self.consumer.close()

    def _commit_until_stored(self) -> int | None:
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end and not self.give_up.is_set():
            try:
                self.consumer.commit(offsets=[TopicPartition(self.topic, 0, self.next)], asynchronous=False)
                return self.next
            except KafkaException:  # the coordinator moving: retried
                self.commit_retries += 1
                time.sleep(0.2)
        return None

    def wait_past(self, offset: int, timeout: float = DEADLINE) -> None:
        end = time.monotonic() + timeout
        while self.next <= offset:
            assert time.monotonic() < end, f"the group's member read up to {self.next}, waiting for {offset}"
            assert self.is_alive(), "the group's member stopped"
            time.sleep(0.05)


def three_replicas(cluster: LocalCluster, topic: str, replicas: list[int] | None = None):
    """A one-partition topic with three replicas (in the order ``replicas`` if given) and min.insync.replicas=2,
    once its ISR is whole: a predicate on the metadata for a whole ISR (the partition when true), and the
    partition."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    if replicas:
        new = NewTopic(topic, 1, replica_assignment=[replicas], config={"min.insync.replicas": "2"})
    else:
        new = NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([new])[topic].result(60)

    def full_isr(metadata):
        part = cluster.partition(topic, 0, metadata)
        return part is not None and part["leader"] >= 0 and len(part["isr"]) == 3 and part

    return full_isr, cluster.wait_until(full_isr, DEADLINE, "a leader and three replicas in the ISR")


def coordinator_partition(cluster: LocalCluster, group: str) -> dict:
    """__consumer_offsets' partition (created on a group's first FindCoordinator), once its ISR is whole."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    end = time.monotonic() + DEADLINE
    while True:
        try:
            admin.describe_consumer_groups([group], request_timeout=10)[group].result(30)
            break
        except KafkaException:  # COORDINATOR_NOT_AVAILABLE while __consumer_offsets is created
            assert time.monotonic() < end, "no coordinator for the group"
            time.sleep(0.2)
    return cluster.wait_until(lambda m: (p := cluster.partition("__consumer_offsets", 0, m)) and p["leader"] >= 0
                              and len(p["isr"]) == 3 and p, DEADLINE, "__consumer_offsets' ISR whole")


def kill_the_leader_over_and_over(cluster: LocalCluster, kills: int, topic: str = "kills",
                                  group_protocol: str = "classic") -> dict:
    """The partition's leader killed -9 ``kills`` times under a writer and a group's reader, restarted each time and
    back in the ISR before the next kill. The topic's replicas are in the order of __consumer_offsets' own, so that
    the two partitions have the same leader and move together: each kill also kills the group's coordinator
    (counted, not assumed). ``group_protocol``: the member's, classic or consumer (KIP-848). What was seen, as
    numbers (no assertion here: the test and the soak judge them)."""
    group = f"{topic}-group"
    offsets = coordinator_partition(cluster, group)
    full_isr, part = three_replicas(cluster, topic, offsets["replicas"])
    writer = Writer(cluster.bootstrap, topic)
    writer.start()
    reader = GroupReader(cluster.bootstrap, topic, group, group_protocol)
    reader.start()
    epochs, failovers, elections, coordinator_kills, leaders = [], [], [], 0, []
    try:
        for _ in range(kills):
            writer.acked_past(len(writer.acked) + 200)  # acknowledged writes under this leader
            part = cluster.wait_until(lambda m: full_isr(m) and len(cluster.partition(
                "__consumer_offsets", 0, m)["isr"]) == 3 and full_isr(m), DEADLINE,
                "the restarted broker back in both ISRs")
            reader.wait_past(0)
            coordinator = cluster.leader("__consumer_offsets")
            coordinator_kills += coordinator == part["leader"]
            read_before = reader.next
            killed_at = time.monotonic()
            cluster.kill(part["leader"])
            moved = cluster.wait_until(
                lambda m: (p := cluster.partition(topic, 0, m))["leader"] not in (-1, part["leader"]) and p,
                DEADLINE, "a new leader from the ISR")
            elections.append(time.monotonic() - killed_at)  # as polled from the controllers (every 50 ms)
            leaders.append((part["leader"], moved["leader"], moved["leader"] in part["isr"],
                            moved["leader_epoch"] > part["leader_epoch"]))
            epochs.append(moved["leader_epoch"])
            writer.acked_past(len(writer.acked) + 200)  # the producer goes on with the new leader
            failovers.append(writer.first_ack_after(killed_at))
            reader.wait_past(read_before + 100)  # and the group's member goes on reading
            cluster.restart(part["leader"])
        cluster.wait_until(full_isr, DEADLINE, "all three replicas in the ISR at the end")
    finally:
        writer.finish()
    probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"{topic}-probe", "log_level": 3})
    try:
        end_offset = watermark_offsets(probe, TopicPartition(topic, 0), 30)[1]
    finally:
        probe.close()
    reader.until = end_offset
    reader.join(DEADLINE)
    reader.give_up.set()
    checker = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "log_level": 3})
    try:
        committed = checker.committed([TopicPartition(topic, 0)], timeout=30)[0].offset
    finally:
        checker.close()
    got = read_all(cluster.bootstrap, topic, len(writer.acked))
    missing = set(writer.acked) - set(got)
    in_offset_order = [reader.read[o] for o in sorted(reader.read)]
    times = [t for t in failovers if t is not None]
    return {
        "kills": len(epochs), "group_protocol": group_protocol, "records_sent": writer.sent, "records_acknowledged": len(writer.acked),
        "producer_errors": writer.errors[:3], "lost": len(missing), "lost_examples": sorted(missing)[:5],
        "duplicated": len(got) - len(set(got)),
        "order_violations": sum(1 for a, b in zip(got, got[1:]) if b <= a),
        "epochs": epochs, "leaders": leaders, "coordinator_kills": coordinator_kills,
        "failover_s": {"median": round(statistics.median(times), 3) if times else None,
                       "max": round(max(times), 3) if times else None, "all": [round(t, 3) for t in times]},
        "election_s": {"median": round(statistics.median(elections), 3) if elections else None,
                       "max": round(max(elections), 3) if elections else None},
        "end_offset": end_offset, "group": {
            "committed": committed, "committed_by_member": reader.committed_at_end,
            "read_offsets": len(reader.read), "read_through": reader.next, "missing_offsets":
                end_offset - len([o for o in reader.read if o < end_offset]),
            "out_of_order": sum(1 for a, b in zip(in_offset_order, in_offset_order[1:]) if b <= a),
            "acknowledged_not_read": len(set(writer.acked) - set(reader.read.values())),
            "mismatched": reader.mismatched[:3], "assignments": reader.assignments, "rewinds": reader.rewinds,
            "rewinds_without_rebalance": reader.bad_rewinds[:3], "errors": reader.errors[:5]}}


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
        seen = kill_the_leader_over_and_over(cluster, KILLS)
    assert not seen["producer_errors"], seen["producer_errors"]
    assert seen["kills"] == KILLS and seen["epochs"] == sorted(set(seen["epochs"]))
    assert all(from_isr and epoch_grew for _, _, from_isr, epoch_grew in seen["leaders"]), seen["leaders"]
    assert seen["lost"] == 0, f"{seen['lost']} acknowledged records lost, e.g. {seen['lost_examples']}"
    assert seen["duplicated"] == 0, "a record was written twice"
    assert seen["order_violations"] == 0, "records out of the order they were written in"
    assert seen["records_acknowledged"] >= 400 * KILLS
    # the group went on through every kill (reading after each one, also when its coordinator was the broker
    # killed), read every offset once in order but for re-reads right after a rebalance, and committed the end
    group = seen["group"]
    assert seen["coordinator_kills"] >= 1, seen["leaders"]
    assert not group["errors"] and not group["mismatched"] and not group["rewinds_without_rebalance"], group
    assert group["missing_offsets"] == 0 and group["out_of_order"] == 0 and group["acknowledged_not_read"] == 0
    assert group["committed"] == group["committed_by_member"] == seen["end_offset"], group


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
        # a paused broker keeps its connections open: what was in flight to it is given up (and sent again to the
        # new leader, idempotent) only after the client's request timeout, by default 60 s of waiting
        writer = Writer(cluster.bootstrap, "paused", **{"socket.timeout.ms": 6000, "request.timeout.ms": 5000})
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
