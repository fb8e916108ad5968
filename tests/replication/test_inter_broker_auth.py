"""Inter-broker security (issue #46): on SASL listeners with ACLs, brokers log in to each other with their
inter-broker user (``--inter-broker-sasl-mechanism`` / ``--inter-broker-user``, a super user here as Kafka's
broker principal usually is), and what only a broker may do needs CLUSTER_ACTION on the cluster, as Kafka:
a replica's Fetch (an ordinary client naming a replica id gets TOPIC_AUTHORIZATION_FAILED and moves nothing),
WriteTxnMarkers (CLUSTER_AUTHORIZATION_FAILED, nothing written); OffsetForLeaderEpoch answers a broker or a
client with DESCRIBE on the topic."""

import pytest
from kio.schema.errors import ErrorCode

from freshet.broker.config import BrokerConfig
from freshet.broker.replication import ReplicaManager
from freshet.broker.replication.client import BrokerConnection
from freshet.broker.security.acls import ALLOW, LITERAL, READ, TOPIC, AclBinding
from freshet.broker.security.credentials import ScramCredential
from freshet.broker.security.listeners import Listener, SecurityConfig
from freshet.broker.server import Broker

from .conftest import LocalReplicas, batch, wait_until

PASSWORDS = {"broker": "inter-broker-secret", "alice": "alice-secret", "bob": "bob-secret"}
LOGIN = ("SCRAM-SHA-512", "broker", PASSWORDS["broker"])


class SecureReplicas(LocalReplicas):
    """LocalReplicas whose brokers listen on SASL_PLAINTEXT only, authorize with ACLs, know the users above,
    and fetch from each other as ``User:broker`` (a super user). alice may READ topic ``t``; bob nothing."""

    async def start_broker(self, node: int) -> Broker:
        security = SecurityConfig(super_users=("User:broker",), inter_broker_sasl_mechanism=LOGIN[0],
                                  inter_broker_user=LOGIN[1], inter_broker_password=LOGIN[2])
        broker = Broker(BrokerConfig(data_dir=str(self.root / f"broker-{node}"), host="127.0.0.1", port=0,
                                     node_id=node, listeners=[Listener("SASL_PLAINTEXT", "127.0.0.1", 0)],
                                     security=security))
        broker.credentials.apply([(user, ScramCredential.from_password(mechanism, password))
                                  for user, password in PASSWORDS.items()
                                  for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")], [])
        broker.authorizer.create([AclBinding(TOPIC, "t", LITERAL, "User:alice", "*", READ, ALLOW)])
        await broker.start()
        broker.replicas = ReplicaManager(broker, node, self._alter_isr_of(node), self.lag_ms)
        self.brokers[node] = broker
        return broker

    async def login(self, node: int, user: str, password: str | None = None) -> BrokerConnection:
        connection = BrokerConnection("127.0.0.1", self.brokers[node].port, f"test-{user}",
                                      sasl=("SCRAM-SHA-256", user, password or PASSWORDS[user]))
        await connection.connect()
        return connection


@pytest.fixture
def secure(run):
    return lambda scenario, count=2: run(scenario, count, kind=SecureReplicas)


def _replica_fetch(replica_id: int, offset: int) -> dict:
    return {"replica_id": replica_id, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "t", "partitions": [{
                "partition": 0, "current_leader_epoch": 0, "fetch_offset": offset, "last_fetched_epoch": -1,
                "log_start_offset": 0, "partition_max_bytes": 1 << 20}]}]}


def test_followers_replicate_through_their_inter_broker_login(secure):
    async def scenario(c):
        await c.replicated_topic("t", (0, 1))
        leader = c.partition(0, "t")
        leader.append(batch(b"a", b"b", b"c"))
        c.brokers[0].group_commit.written(leader)
        await wait_until(lambda: c.partition(1, "t").log_end_offset == 3, "the follower, logged in, has the records")
        await wait_until(lambda: leader.high_watermark == 3, "the high watermark moved by its fetches")

    secure(scenario)


def test_a_client_posing_as_a_replica_is_refused_and_moves_nothing(secure):
    async def scenario(c):
        await c.replicated_topic("t", (0, 1), nodes=[0])  # broker 1 is told nothing: it never fetches
        leader_state = c.brokers[0].replicas.leaders[("t", 0)]
        alice = await c.login(0, "alice")
        leader = c.partition(0, "t")
        leader.append(batch(b"x", b"y"))  # written by the leader; the ISR (0, 1) has not got it
        c.brokers[0].group_commit.written(leader)
        await wait_until(lambda: leader.durable_offset == 2, "the leader's fsync")
        assert leader.high_watermark == 0
        # alice may READ t, and names broker 1 as the replica fetching: Kafka's answer, and no progress counted
        fetched = await alice.request(1, 12, _replica_fetch(1, 2))
        [part] = fetched.responses[0].partitions
        assert part.error_code == ErrorCode.topic_authorization_failed and not part.records
        assert leader.high_watermark == 0 and leader_state.followers[1].log_end_offset == -1
        # as a consumer (replica id -1) she reads what is committed, as before
        consumed = await alice.request(1, 12, _replica_fetch(-1, 0))
        assert consumed.responses[0].partitions[0].error_code == ErrorCode.none
        # the broker's own login (CLUSTER_ACTION) is what moves it
        broker = await c.login(0, "broker")
        fetched = await broker.request(1, 12, _replica_fetch(1, 2))
        assert fetched.responses[0].partitions[0].error_code == ErrorCode.none
        assert leader.high_watermark == 2 and leader_state.followers[1].log_end_offset == 2
        for connection in (alice, broker):
            connection.close()

    secure(scenario)


def test_offset_for_leader_epoch_needs_cluster_action_or_describe_and_markers_need_cluster_action(secure):
    async def scenario(c):
        await c.replicated_topic("t", (0, 1), nodes=[0])
        leader = c.partition(0, "t")
        leader.append(batch(b"x"))
        c.brokers[0].group_commit.written(leader)
        await wait_until(lambda: leader.durable_offset == 1, "the leader's fsync")
        question = {"replica_id": 1, "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0}]}]}
        answers = {}
        for user in ("alice", "bob", "broker"):
            connection = await c.login(0, user)
            answer = (await connection.request(23, 4, question)).topics[0].partitions[0]
            answers[user] = (answer.error_code, answer.end_offset)
            markers = await connection.request(27, 1, {"markers": [{
                "producer_id": 7, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 0,
                "topics": [{"name": "t", "partition_indexes": [0]}]}]})
            if user != "broker":
                code = markers.markers[0].topics[0].partitions[0].error_code
                assert code == ErrorCode.cluster_authorization_failed and leader.log_end_offset == 1, user
            connection.close()
        assert answers == {"alice": (ErrorCode.none, 1), "bob": (ErrorCode.topic_authorization_failed, -1),
                           "broker": (ErrorCode.none, 1)}
        assert leader.log_end_offset == 2  # the broker's markers were written

    secure(scenario)


def test_a_wrong_inter_broker_password_is_refused_with_the_brokers_reason(secure):
    async def scenario(c):
        with pytest.raises(ConnectionError, match="authentication failed"):
            await c.login(0, "broker", "not-the-password")

    secure(scenario, count=1)


@pytest.mark.parametrize("args, message", [
    (["--inter-broker-user", "broker"], "--inter-broker-sasl-mechanism, --inter-broker-user and "
                                        "--inter-broker-password-file go together"),
    (["--inter-broker-sasl-mechanism", "SCRAM-SHA-512", "--inter-broker-user", "broker",
      "--inter-broker-password-file", "/nonexistent/password"], "--inter-broker-password-file: No such file"),
])
def test_inter_broker_login_flags_refused_in_one_line(tmp_path, args, message):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "freshet.cli.main", "broker", "start", "--data-dir",
                           str(tmp_path / "b"), "--port", "0", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().startswith(f"error: {message}") and len(done.stderr.strip().splitlines()) == 1
