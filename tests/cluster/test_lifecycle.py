"""Brokers joining and leaving a running cluster (real processes: three controllers, three brokers): a broker
stopped with SIGTERM hands its leaderships over before it exits (controlled shutdown), so a rolling restart of
every broker under an idempotent acks=all producer and a consumer group fails no produce and loses or doubles
no record."""

import threading
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic
from kio.schema.errors import ErrorCode

from freshet.client.offsets import watermark_offsets
from freshet.local.cluster import LocalCluster

from .conftest import DEADLINE, admin
from .test_metadata import created


class GroupReader(threading.Thread):
    """A member of a consumer group reading ``topic`` all along, committing what it processed (synchronously,
    after each batch), and recording every error a poll or a commit gave it."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "session.timeout.ms": 30000, "log_level": 3})
        self.consumer.subscribe([topic])
        self.got: dict[int, list[int]] = {}  # partition -> values in the order read
        self.errors: list[str] = []
        self.stop = threading.Event()

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.got.values())

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                batch = self.consumer.consume(500, 0.2)
                for m in batch:
                    if m.error():
                        self.errors.append(str(m.error()))
                    else:
                        self.got.setdefault(m.partition(), []).append(int(m.value()))
                if any(not m.error() for m in batch):
                    try:
                        self.consumer.commit(asynchronous=False)
                    except Exception as exc:  # noqa: BLE001 (a commit the client could not make is an error here)
                        self.errors.append(f"commit: {exc}")
        finally:
            self.consumer.close()


def read_partitions(bootstrap: str, topic: str, partitions: int) -> dict[int, list[int]]:
    """Every record of the topic, per partition, read from the start to the high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lifecycle-check", "enable.auto.commit": False,
                         "log_level": 3})
    out: dict[int, list[int]] = {}
    try:
        for p in range(partitions):
            _, high = watermark_offsets(consumer, TopicPartition(topic, p), 30)
            consumer.assign([TopicPartition(topic, p, 0)])
            values: list[int] = []
            end = time.monotonic() + DEADLINE
            while len(values) < high and time.monotonic() < end:
                m = consumer.poll(0.5)
                if m is not None and not m.error():
                    values.append(int(m.value()))
            out[p] = values
    finally:
        consumer.close()
    return out


def check_log(cluster: LocalCluster, topic: str, partitions: int, acked: list[int]) -> dict[int, list[int]]:
    """Every acknowledged record in the topic exactly once, each partition in the order written."""
    log = read_partitions(cluster.bootstrap, topic, partitions)
    everything = [v for values in log.values() for v in values]
    assert len(everything) == len(set(everything)), "a record was written twice"
    for p, values in log.items():
        assert values == sorted(values), f"partition {p} out of the order written"
    missing = set(acked) - set(everything)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    return log


def leaders_of(metadata: dict, topic: str) -> dict[int, int]:
    return {p["partition"]: p["leader"] for t in metadata["topics"] if t["name"] == topic for p in t["partitions"]}


@pytest.mark.timeout(1200)
def test_a_rolling_restart_under_load_fails_no_produce_and_loses_or_doubles_nothing(tmp_path):
    from ..replication.test_kill_leader import Writer

    with LocalCluster(3, directory=str(tmp_path / "cluster")) as cluster:
        created(admin(cluster.bootstrap), NewTopic("rolling", 3, 3, config={"min.insync.replicas": "2"}))
        cluster.wait_until(cluster.fully_replicated, DEADLINE, "the topic's whole ISR")
        writer = Writer(cluster.bootstrap, "rolling")
        writer.start()
        reader = GroupReader(cluster.bootstrap, "rolling", "rolling-readers")
        reader.start()
        moves = []

        def restarted(node_id: int) -> None:
            # the stopped broker's leaderships were handed over to others: nothing offline meanwhile
            moves.append(leaders_of(cluster.metadata(), "rolling"))
            writer.acked_past(len(writer.acked) + 300)  # the producer goes on after each restart

        try:
            writer.acked_past(500)
            cluster.rolling_restart(DEADLINE, on_restart=restarted)
            writer.acked_past(len(writer.acked) + 300)
        finally:
            writer.finish()
        try:
            assert not writer.errors, writer.errors[:3]
            deadline = time.monotonic() + DEADLINE
            while reader.count < len(writer.acked) and time.monotonic() < deadline and reader.is_alive():
                time.sleep(0.2)
        finally:
            reader.stop.set()
            reader.join(DEADLINE)
        assert len(moves) == 3 and all(-1 not in m.values() for m in moves)
        log = check_log(cluster, "rolling", 3, writer.acked)
        # the group read every record once, each partition in order: its membership moved with its coordinator
        # (group_metadata), so no commit was refused and no batch read again
        assert not reader.errors, reader.errors[:3]
        for p, values in reader.got.items():
            assert values == log[p][:len(values)], f"partition {p}: the group read other records than the log's"
        assert reader.count == sum(len(v) for v in log.values())


@pytest.mark.timeout(600)
def test_a_broker_stopped_with_sigterm_leads_nothing_before_it_exits(own_cluster):
    """The controlled shutdown as the metadata shows it: before broker 1 is fenced (its session closes when it
    exits), its leaderships have moved with a new leader epoch and it has left every ISR."""
    created(admin(own_cluster.bootstrap), NewTopic("handover", 3, 3))
    before = own_cluster.wait_until(lambda m: own_cluster.fully_replicated(m) and m, DEADLINE, "whole ISRs")
    led = [p for t in before["topics"] if t["name"] == "handover" for p in t["partitions"] if p["leader"] == 1]
    assert led, "broker 1 leads one of the three partitions (Kafka's placement spreads the leaders)"
    seen: list[dict] = []
    watching = threading.Event()
    watcher = threading.Thread(target=_watch_until_fenced, args=(own_cluster, 1, seen, watching), daemon=True)
    watcher.start()
    assert watching.wait(DEADLINE)
    own_cluster.stop_broker(1)
    watcher.join(DEADLINE)
    # the last metadata in which broker 1 was still unfenced: it led nothing and was in no ISR any more
    last_unfenced = [m for m in seen if not _broker(m, 1)["fenced"]][-1]
    parts = [p for t in last_unfenced["topics"] if t["name"] == "handover" for p in t["partitions"]]
    assert all(p["leader"] not in (1, -1) and 1 not in p["isr"] for p in parts)
    for p in led:
        moved = parts[p["partition"]]
        assert moved["leader"] in p["isr"] and moved["leader_epoch"] == p["leader_epoch"] + 1
    assert "leaderships handed over" in own_cluster.log_tail("broker", 1, 40)


def _broker(metadata: dict, node_id: int) -> dict:
    return next(b for b in metadata["brokers"] if b["broker_id"] == node_id)


def _watch_until_fenced(cluster: LocalCluster, node_id: int, seen: list[dict], watching: threading.Event) -> None:
    """Every metadata version the controllers give until broker ``node_id`` is fenced (a long poll each)."""
    from freshet.controller.client import ControllerClient

    version = None
    end = time.monotonic() + DEADLINE
    with ControllerClient(cluster.controller_addresses[0], password=cluster.password) as client:
        while time.monotonic() < end:
            metadata = client.request({"op": "metadata", "since": version, "wait_ms": 5000})
            version = metadata["version"]
            seen.append(metadata)
            watching.set()
            if _broker(metadata, node_id)["fenced"]:
                break


def _preferred_everywhere(topic: str):
    def check(metadata: dict) -> bool:
        parts = [p for t in metadata["topics"] if t["name"] == topic for p in t["partitions"]]
        return bool(parts) and all(p["leader"] == p["replicas"][0] and len(p["isr"]) == len(p["replicas"])
                                   for p in parts)
    return check


@pytest.mark.timeout(600)
def test_auto_leader_rebalance_gives_the_leaderships_back_to_the_preferred_replicas(tmp_path):
    """auto.leader.rebalance.enable (on by default): a broker restarted leads again, once back in the ISRs,
    the partitions it is the preferred replica of (checked every second here, 300 s by default)."""
    with LocalCluster(3, directory=str(tmp_path / "c"),
                      controller_args=["--leader-imbalance-check-interval-seconds", "1"]) as cluster:
        created(admin(cluster.bootstrap), NewTopic("balanced", 6, 3))
        cluster.wait_until(_preferred_everywhere("balanced"), DEADLINE, "the placement's leaders")
        before = cluster.metadata()
        cluster.restart(2)  # controlled shutdown: its leaderships move to others
        after = cluster.wait_until(lambda m: _preferred_everywhere("balanced")(m) and m, DEADLINE,
                                   "broker 2 leading its preferred partitions again")
        epochs = {p["partition"]: p["leader_epoch"] for t in before["topics"] if t["name"] == "balanced"
                  for p in t["partitions"]}
        moved = [p for t in after["topics"] if t["name"] == "balanced" for p in t["partitions"]
                 if p["replicas"][0] == 2]
        assert moved and all(p["leader_epoch"] == epochs[p["partition"]] + 2 for p in moved)  # away and back


@pytest.mark.timeout(600)
def test_elect_leaders_cli_moves_leaderships_back_and_refuses_bad_input_in_one_line(tmp_path):
    from click.testing import CliRunner

    from freshet.cli.main import cli

    directory = str(tmp_path / "c")
    with LocalCluster(3, directory=directory, controller_args=["--auto-leader-rebalance-enable", "false"]) as cluster:
        created(admin(cluster.bootstrap), NewTopic("elect", 3, 3))
        cluster.wait_until(_preferred_everywhere("elect"), DEADLINE, "the placement's leaders")
        cluster.restart(1)
        cluster.wait_until(cluster.fully_replicated, DEADLINE, "broker 1 back in the ISRs")
        mine = [p for p, leader in leaders_of(cluster.metadata(), "elect").items()
                if cluster.partition("elect", p)["replicas"][0] == 1]
        assert mine and all(leaders_of(cluster.metadata(), "elect")[p] != 1 for p in mine)  # no auto balance
        run = CliRunner().invoke(cli, ["cluster", "elect-leaders", "--topic", "elect", "--data-dir", directory])
        assert run.exit_code == 0, run.output
        lines = run.output.splitlines()
        for p in range(3):
            assert (f"elect-{p}: elected" in lines) == (p in mine)
            assert (f"elect-{p}: elected" in lines) or any(
                line.startswith(f"elect-{p}: ELECTION_NOT_NEEDED") for line in lines)
        cluster.wait_until(_preferred_everywhere("elect"), DEADLINE, "the preferred leaders")
        again = CliRunner().invoke(cli, ["cluster", "elect-leaders", "--data-dir", directory])  # every partition
        assert again.exit_code == 0 and "0 partition(s) elected" in again.output, again.output
        before = cluster.metadata()
        for args, message in (
                (["--topic", "nope"], "error: topic 'nope' does not exist"),
                (["--topic", "elect", "--partition", "7"], "error: topic 'elect' has no partition 7 (it has 3)"),
                (["--partition", "0"], "error: --partition needs --topic")):
            bad = CliRunner().invoke(cli, ["cluster", "elect-leaders", *args, "--data-dir", directory])
            assert (bad.exit_code, bad.output.strip()) == (1, message)
        assert [t["partitions"] for t in cluster.metadata()["topics"]] == [t["partitions"] for t in before["topics"]]


def _cli(*args: str):
    from click.testing import CliRunner

    from freshet.cli.main import cli

    return CliRunner().invoke(cli, ["cluster", *args])


def _preferred(metadata: dict) -> bool:
    return all(p["leader"] == p["replicas"][0] for t in metadata["topics"] for p in t["partitions"])


def _assignment(metadata: dict) -> dict:
    return {(t["name"], p["partition"]): (p["replicas"], p["leader"]) for t in metadata["topics"]
            for p in t["partitions"]}


@pytest.mark.timeout(900)
def test_a_decommission_refused_changes_nothing_and_an_added_broker_takes_partitions_by_rebalance(tmp_path):
    directory = str(tmp_path / "c")
    with LocalCluster(3, directory=directory,
                      controller_args=["--leader-imbalance-check-interval-seconds", "1"]) as cluster:
        created(admin(cluster.bootstrap), NewTopic("spread", 6, 3), NewTopic("pairs", 6, 2))
        cluster.wait_until(cluster.fully_replicated, DEADLINE, "whole ISRs")
        rolled = _cli("restart", "--broker", "2", "--data-dir", directory)
        assert rolled.exit_code == 0 and rolled.output.splitlines() == [
            "broker 2 restarted", "every partition has its whole ISR"], rolled.output
        bad = _cli("restart", "--broker", "9", "--data-dir", directory)
        assert (bad.exit_code, bad.output.strip()) == (
            1, f"error: broker 9 is not a broker of the cluster in {cluster.directory}")
        cluster.reload()
        before = cluster.wait_until(lambda m: _preferred(m) and cluster.fully_replicated(m) and m, DEADLINE,
                                    "the preferred leaders back (auto.leader.rebalance.enable)")
        refused = _cli("decommission", "2", "--data-dir", directory)
        assert refused.exit_code == 1 and len(refused.output.splitlines()) == 1, refused.output
        assert refused.output.startswith("error: decommissioning broker 2 would leave ") and \
            "add a broker first" in refused.output
        assert _assignment(cluster.metadata()) == _assignment(before) and 2 in cluster.running_nodes()
        unknown = _cli("decommission", "7", "--data-dir", directory)
        assert (unknown.exit_code, unknown.output.strip()) == (
            1, f"error: broker 7 is not a broker of the cluster in {cluster.directory}")

        added = _cli("add-broker", "--data-dir", directory)
        assert added.exit_code == 0 and added.output.startswith("broker 4 running on "), added.output
        assert 4 in cluster.reload().nodes and 4 in cluster.running_nodes()  # stopped with the cluster
        assert not any(4 in p["replicas"] for t in cluster.metadata()["topics"] for p in t["partitions"])
        proposed = _cli("rebalance", "--data-dir", directory)
        assert proposed.exit_code == 0 and "partition(s) to move: freshet cluster rebalance --apply" in \
            proposed.output, proposed.output
        assert "planned: replicas per broker 1:" in proposed.output
        assert not any(4 in p["replicas"] for t in cluster.metadata()["topics"] for p in t["partitions"])
        applied = _cli("rebalance", "--apply", "--data-dir", directory)
        assert applied.exit_code == 0, applied.output
        after = cluster.wait_until(lambda m: cluster.fully_replicated(m) and m, DEADLINE, "whole ISRs")
        replicas, leaders = {b: 0 for b in (1, 2, 3, 4)}, {b: 0 for b in (1, 2, 3, 4)}
        for t in after["topics"]:
            for p in t["partitions"]:
                for r in p["replicas"]:
                    replicas[r] += 1
                leaders[p["leader"]] += 1
        assert max(replicas.values()) - min(replicas.values()) <= 1, replicas
        assert max(leaders.values()) - min(leaders.values()) <= 1, leaders
        again = _cli("rebalance", "--data-dir", directory)
        assert again.exit_code == 0 and "nothing to move" in again.output, again.output

        # UnregisterBroker (API 64), as kafka-cluster.sh unregister: a broker stopped for good leaves the metadata
        from freshet.testing.raw_kafka import RawConnection

        extra = cluster.add_broker()
        cluster.stop_broker(extra)
        with RawConnection(cluster.bootstrap_of(1)) as conn:
            unknown = conn.request(64, 0, {"broker_id": 99})
            assert unknown.error_code == ErrorCode.broker_id_not_registered and "99" in unknown.error_message
            assert conn.request(64, 0, {"broker_id": extra}).error_code == 0
        assert extra not in [b["broker_id"] for b in cluster.metadata()["brokers"]]
        assert _assignment(cluster.metadata()) == _assignment(after)


def test_unregister_broker_on_the_one_node_broker_is_invalid_request(broker):
    from freshet.testing.raw_kafka import RawConnection

    with RawConnection(broker.bootstrap) as conn:
        answer = conn.request(64, 0, {"broker_id": 0})
    assert answer.error_code == ErrorCode.invalid_request and "not in a cluster" in answer.error_message


@pytest.mark.timeout(900)
def test_decommissioning_a_broker_that_leads_partitions_under_a_producer_loses_nothing(tmp_path):
    from ..replication.test_kill_leader import Writer

    directory = str(tmp_path / "c")
    with LocalCluster(4, directory=directory) as cluster:
        created(admin(cluster.bootstrap), NewTopic("moving", 4, 3, config={"min.insync.replicas": "2"}))
        metadata = cluster.wait_until(lambda m: cluster.fully_replicated(m) and m, DEADLINE, "whole ISRs")
        leaving = next(p["leader"] for t in metadata["topics"] if t["name"] == "moving" for p in t["partitions"])
        writer = Writer(cluster.bootstrap, "moving")
        writer.start()
        try:
            writer.acked_past(500)
            run = _cli("decommission", str(leaving), "--throttle", "50000000", "--data-dir", directory)
            assert run.exit_code == 0, run.output
            assert f"broker {leaving} decommissioned" in run.output
            # throttled while the replicas moved (as kafka-reassign-partitions --throttle), not after
            assert "throttle: 50000000 bytes/s on brokers " in run.output and "throttle removed" in run.output
            assert cluster.reload().nodes[leaving].decommissioned
            writer.acked_past(len(writer.acked) + 300)
        finally:
            writer.finish()
        assert not writer.errors, writer.errors[:3]
        after = cluster.metadata()
        assert leaving not in [b["broker_id"] for b in after["brokers"]]  # unregistered
        assert all(leaving not in p["replicas"] and len(p["replicas"]) == 3 for t in after["topics"]
                   for p in t["partitions"])
        assert leaving not in cluster.running_nodes()
        assert not any("throttled" in key for configs in after["broker_configs"].values() for key in configs)
        assert not any("throttled" in key for t in after["topics"] for key in t["configs"])
        cluster.wait_until(cluster.fully_replicated, DEADLINE, "whole ISRs on the three others")
        check_log(cluster, "moving", 4, writer.acked)


@pytest.mark.timeout(600)
def test_status_shows_a_broker_shutting_down_until_it_registers_again(own_cluster):
    """A broker the controllers have taken ControlledShutdown from (its process still up: here the command is
    sent by hand) leads nothing and is listed as shutting down, until its next incarnation registers."""
    from freshet.controller.client import ControllerClient

    created(admin(own_cluster.bootstrap), NewTopic("status", 3, 3))
    own_cluster.wait_until(own_cluster.fully_replicated, DEADLINE, "whole ISRs")
    epoch = _broker(own_cluster.metadata(), 3)["epoch"]
    with ControllerClient(own_cluster.controller_addresses[0], password=own_cluster.password) as client:
        answer = client.command({"command": "ControlledShutdown", "broker_id": 3, "broker_epoch": epoch})
    assert answer["error"] == "NONE", answer
    assert 3 not in leaders_of(own_cluster.metadata(), "status").values()
    status = _cli("status", "--data-dir", own_cluster.directory)
    [line] = [line for line in status.output.splitlines() if line.startswith("broker 3 ")]
    assert status.exit_code == 0 and " shutting down running" in line, status.output
    own_cluster.restart(3)
    status = _cli("status", "--data-dir", own_cluster.directory)
    assert [line.split()[3] for line in status.output.splitlines() if line.startswith("broker 3 ")] == ["live"]


@pytest.mark.timeout(600)
def test_elect_leaders_unclean_gives_an_offline_partition_a_replica_outside_the_isr(own_cluster):
    """The ISR's last member dead, the other replica back but outside the ISR: the partition stays offline (no
    unclean election by default); a preferred election is refused, `elect-leaders --unclean` elects it."""
    directory = own_cluster.directory
    created(admin(own_cluster.bootstrap), NewTopic("offline", 1, 2))
    part = own_cluster.wait_until(lambda m: (p := own_cluster.partition("offline", 0, m)) and len(p["isr"]) == 2
                                  and p, DEADLINE, "the whole ISR")
    first, second = part["replicas"]
    own_cluster.kill(second)
    own_cluster.wait_until(lambda m: own_cluster.partition("offline", 0, m)["isr"] == [first], DEADLINE,
                           f"broker {second} out of the ISR")
    own_cluster.kill(first)
    own_cluster.wait_until(lambda m: own_cluster.partition("offline", 0, m)["leader"] == -1, DEADLINE, "offline")
    own_cluster.restart(second)
    assert own_cluster.partition("offline", 0)["leader"] == -1  # not in the ISR: no leader without being asked
    preferred = _cli("elect-leaders", "--topic", "offline", "--data-dir", directory)
    assert preferred.exit_code == 1 and "offline-0: PREFERRED_LEADER_NOT_AVAILABLE" in preferred.output, \
        preferred.output
    unclean = _cli("elect-leaders", "--topic", "offline", "--partition", "0", "--unclean", "--data-dir", directory)
    assert unclean.exit_code == 0 and "offline-0: elected" in unclean.output, unclean.output
    part = own_cluster.wait_until(lambda m: (p := own_cluster.partition("offline", 0, m))["leader"] == second and p,
                                  DEADLINE, f"broker {second} leading")
    assert part["isr"] == [second]


def test_a_local_clusters_controllers_ask_for_the_secret_by_default(cluster):
    """LocalCluster (and so ``freshet cluster start``) starts its controllers with ``--endpoint-auth``: a client
    without the cluster secret is refused and changes nothing; the brokers prove it and serve."""
    from freshet.controller.client import ControllerClient

    before = [b["broker_id"] for b in cluster.metadata()["brokers"]]
    with ControllerClient(cluster.controller_addresses[0], timeout=30, password="") as client:
        answer = client.command({"command": "UnregisterBroker", "broker_id": 99})  # none: harmless if served
    assert answer["error"] == "CLUSTER_AUTHORIZATION_FAILED", answer
    with ControllerClient(cluster.controller_addresses[0], timeout=30, password=cluster.password) as client:
        assert client.status()["endpoint_auth"] is True
    assert [b["broker_id"] for b in cluster.metadata()["brokers"]] == before
