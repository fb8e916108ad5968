"""A cluster of SASL brokers (issue #46): each broker listens on SASL_PLAINTEXT only and logs in to the others with
``--inter-broker-sasl-mechanism`` / ``--inter-broker-user`` / ``--inter-broker-password-file``; the first one adds
the user to the cluster's SCRAM users, and replication works through those logins: acks=all with
``min.insync.replicas=3`` is acknowledged only once both followers, logged in, have fetched."""

import sys

from freshet.local.cluster import LocalCluster

from .test_metadata import created, wait_for


class SaslCluster(LocalCluster):
    def __init__(self, directory: str, password_file: str) -> None:
        super().__init__(3, directory=directory)
        self.inter_broker_password_file = password_file  # password_file is the controllers' cluster secret

    def _start_broker(self, node) -> None:
        controllers = ",".join(f"{h}:{p}" for h, p in self.controller_addresses)
        proc = self._spawn("broker", node.node_id, [
            sys.executable, "-m", "freshet.cli.main", "broker", "start", "--node-id", str(node.node_id),
            "--controller", controllers, "--data-dir", self.data_dir(node.node_id),
            "--listener", f"SASL_PLAINTEXT://127.0.0.1:{node.port}", "--super-user", "User:broker",
            "--inter-broker-sasl-mechanism", "SCRAM-SHA-512", "--inter-broker-user", "broker",
            "--inter-broker-password-file", self.inter_broker_password_file, *self.state.broker_args])
        node.broker_pid = proc.pid


def test_sasl_brokers_replicate_through_their_inter_broker_login(tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    password_file = tmp_path / "broker.password"
    password_file.write_text("inter-broker-secret\n")
    with SaslCluster(str(tmp_path / "c"), str(password_file)) as cluster:
        login = {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                 "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "broker",
                 "sasl.password": "inter-broker-secret"}
        # added by the first broker once unfenced, which may be after the cluster's start returned
        wait_for("the inter-broker user in the cluster's SCRAM users",
                 lambda: cluster.metadata()["users"] == {"broker": ["SCRAM-SHA-512"]})

        def takes_the_login(node: int) -> bool:
            """The broker knows the user (its metadata long poll brought it) and names a controller it lists."""
            from confluent_kafka import KafkaException

            try:
                md = AdminClient({**login, "bootstrap.servers": cluster.bootstrap_of(node)}).list_topics(timeout=10)
            except KafkaException:
                return False
            return md.controller_id in md.brokers and len(md.brokers) == 3

        # a client refused by a broker that has not learnt the user yet waits out librdkafka's reconnect backoff
        wait_for("every broker taking the login", lambda: all(takes_the_login(n) for n in (1, 2, 3)))
        created(AdminClient({**login, "socket.timeout.ms": 30000}),
                NewTopic("secured", 3, 3, config={"min.insync.replicas": "3"}))
        errors = []
        producer = Producer({**login, "acks": "all", "enable.idempotence": True, "message.timeout.ms": 120000})
        for i in range(300):
            producer.produce("secured", f"r-{i}".encode(), partition=i % 3, on_delivery=lambda e, _m: errors.append(e))
        assert producer.flush(120) == 0
        assert errors == [None] * 300  # every partition's two followers fetched them, logged in
        wait_for("every ISR whole", lambda: all(len(cluster.partition("secured", i)["isr"]) == 3 for i in range(3)))
        wrong = AdminClient({**login, "sasl.password": "wrong", "socket.timeout.ms": 10000})
        try:
            wrong.list_topics(timeout=5)
            refused = False
        except Exception:  # noqa: BLE001 - librdkafka's authentication failure
            refused = True
        assert refused
