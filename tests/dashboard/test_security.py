"""The console's security pages against a SASL broker with an authorizer: users (SCRAM), ACLs and client quotas
listed, added, changed and removed; bad input refused before anything is sent, the cluster's refusals shown with
their Kafka error names, and nothing changed by either."""

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from fastapi.testclient import TestClient

from freshet.dashboard.app import create_app
from freshet.dashboard.collector import Collector

from .secured import add_users, sasl


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(bootstrap, the dashboard running as the super user ``admin``)."""
    from freshet.local import BrokerProcess

    data = tmp_path_factory.mktemp("secured") / "data"
    add_users(data, "admin")
    with BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT"],
                       extra_args=["--super-user", "User:admin"]) as b, pytest.MonkeyPatch.context() as env:
        for variable, value in {"FRESHET_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "FRESHET_SASL_MECHANISM": "PLAIN",
                                "FRESHET_SASL_USERNAME": "admin", "FRESHET_SASL_PASSWORD": "admin-pw"}.items():
            env.setenv(variable, value)
        admin = AdminClient(sasl(b.bootstrap, "admin"))
        admin.create_topics([NewTopic("vault", 1)])["vault"].result(10)
        yield b.bootstrap, TestClient(create_app(Collector(b.bootstrap)))


def scram(bootstrap: str, user: str, password: str) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user, "sasl.password": password, "log_level": 0}


def signs_in(bootstrap: str, user: str, password: str) -> bool:
    """True once the broker answers the user, False once it refused the user's SASL authentication (librdkafka's
    _AUTHENTICATION error, as soon as it comes: not a metadata request's timeout run out)."""
    refused = []

    def on_error(err):
        if err.code() == KafkaError._AUTHENTICATION:
            refused.append(err)

    admin = AdminClient({**scram(bootstrap, user, password), "error_cb": on_error})
    deadline = time.monotonic() + 60
    while not refused:
        try:
            admin.list_topics(timeout=0.5)
            return True
        except KafkaException:
            assert time.monotonic() < deadline, f"{user} neither signed in nor refused"
            admin.poll(0)
    return False


def write(bootstrap: str, user: str, password: str) -> str | None:
    """Produces one record to ``vault`` as the user: None when written, else the Kafka error name."""
    producer = Producer({**scram(bootstrap, user, password), "enable.idempotence": False,
                         "message.timeout.ms": 10_000})
    outcome = {}
    producer.produce("vault", b"v", on_delivery=lambda err, msg: outcome.update(err=err))
    producer.flush(20)
    return outcome["err"].name() if outcome.get("err") else None


def detail(answer, status: int) -> str:
    assert answer.status_code == status, answer.text
    return answer.json()["detail"]


def users(client) -> dict:
    answer = client.get("/api/security/users")
    assert answer.status_code == 200, answer.text
    return {u["name"]: [c["mechanism"] for c in u["credentials"]] for u in answer.json()["users"]}


def test_users_added_given_a_new_password_and_deleted(cluster):
    bootstrap, client = cluster
    before = users(client)
    assert "carol" not in before
    assert "may not be empty" in detail(client.post("/api/security/users", json={"name": "carol", "password": ""}), 400)
    assert "mechanism must be one of SCRAM-SHA-256, SCRAM-SHA-512" in detail(client.post(
        "/api/security/users", json={"name": "carol", "password": "x", "mechanism": "MD5"}), 400)
    assert client.post("/api/security/users", json={"name": "carol", "password": "x", "iterations": 10}) \
        .status_code == 422
    assert users(client) == before  # nothing was made

    added = client.post("/api/security/users", json={"name": "carol", "password": "first-pw"})
    assert added.status_code == 200, added.text
    assert users(client)["carol"] == ["SCRAM-SHA-256"] and signs_in(bootstrap, "carol", "first-pw")
    client.post("/api/security/users", json={"name": "carol", "password": "second-pw"}).raise_for_status()
    assert signs_in(bootstrap, "carol", "second-pw") and not signs_in(bootstrap, "carol", "first-pw")

    assert client.delete("/api/security/users/carol").json() == {"deleted": "carol", "mechanisms": ["SCRAM-SHA-256"]}
    assert "carol" not in users(client) and not signs_in(bootstrap, "carol", "second-pw")
    assert "no user 'carol' (RESOURCE_NOT_FOUND)" in detail(client.delete("/api/security/users/carol"), 404)


def acl_rows(client, **query) -> list:
    answer = client.get("/api/security/acls", params=query)
    assert answer.status_code == 200, answer.text
    return answer.json()["acls"]


def test_an_acl_added_lets_a_client_write_and_removed_denies_it(cluster):
    bootstrap, client = cluster
    client.post("/api/security/users", json={"name": "dave", "password": "dave-pw"}).raise_for_status()
    assert write(bootstrap, "dave", "dave-pw") == "TOPIC_AUTHORIZATION_FAILED"
    grant = {"principal": "User:dave", "resource_type": "topic", "resource_name": "vault", "operation": "WRITE"}
    before = acl_rows(client)
    for bad, message in [({"operation": "FLY"}, "operation must be one of"),
                         ({"principal": "dave"}, "principal must be User:<name>"),
                         ({"resource_type": "database"}, "resource_type must be one of topic, group, cluster"),
                         ({"resource_name": ""}, "a topic ACL needs a resource_name")]:
        assert message in detail(client.post("/api/security/acls", json={**grant, **bad}), 400)
    assert acl_rows(client) == before

    assert client.post("/api/security/acls", json=grant).status_code == 201
    assert acl_rows(client, principal="User:dave") == [
        {"principal": "User:dave", "host": "*", "operation": "WRITE", "permission": "ALLOW",
         "resource_type": "topic", "resource_name": "vault", "pattern": "literal"}]
    assert acl_rows(client, resource_type="topic", resource_name="vault") == acl_rows(client, principal="User:dave")
    assert write(bootstrap, "dave", "dave-pw") is None

    removed = client.post("/api/security/acls/delete", json=grant)
    assert removed.status_code == 200 and len(removed.json()["removed"]) == 1
    assert acl_rows(client, principal="User:dave") == []
    assert write(bootstrap, "dave", "dave-pw") == "TOPIC_AUTHORIZATION_FAILED"
    assert "no such ACL" in detail(client.post("/api/security/acls/delete", json=grant), 404)


def quota_rows(client) -> list:
    answer = client.get("/api/security/quotas")
    assert answer.status_code == 200, answer.text
    return answer.json()["quotas"]


def test_client_quotas_set_refused_and_removed(cluster):
    _, client = cluster
    before = quota_rows(client)
    change = {"entity": {"user": "erin"}, "set": {"producer_byte_rate": 1048576}}
    assert client.post("/api/security/quotas", json=change).json() == {
        "entity": {"user": "erin"}, "values": {"producer_byte_rate": 1048576.0}}
    defaults = {"entity": {"user": None}, "set": {"consumer_byte_rate": 2097152}}
    client.post("/api/security/quotas", json=defaults).raise_for_status()
    assert {"entity": {"user": "erin"}, "values": {"producer_byte_rate": 1048576.0}} in quota_rows(client)
    assert {"entity": {"user": None}, "values": {"consumer_byte_rate": 2097152.0}} in quota_rows(client)
    now = quota_rows(client)

    refused = detail(client.post("/api/security/quotas", json={"entity": {"user": "erin"}, "set": {
        "producer_byte_rate": 5, "fly_rate": 1}}), 400)
    assert refused.startswith("cannot change the quotas of user=erin: INVALID_REQUEST: 'fly_rate' is not a quota")
    assert "INVALID_REQUEST" in detail(client.post("/api/security/quotas", json={
        "entity": {"user": "erin"}, "set": {"producer_byte_rate": -1}}), 400)
    assert "entity types are user, client-id, ip" in detail(client.post("/api/security/quotas", json={
        "entity": {"group": "g"}, "set": {"producer_byte_rate": 1}}), 400)
    assert "nothing to change" in detail(client.post("/api/security/quotas", json={"entity": {"user": "erin"}}), 400)
    assert quota_rows(client) == now  # the refused entry changed nothing, not even its valid half

    for entity, key in (({"user": "erin"}, "producer_byte_rate"), ({"user": None}, "consumer_byte_rate")):
        gone = client.post("/api/security/quotas", json={"entity": entity, "remove": [key]})
        assert gone.json() == {"entity": entity, "values": {}}
    assert quota_rows(client) == before


def test_acls_on_a_broker_without_an_authorizer_say_so(broker, monkeypatch):
    for variable in ("FRESHET_SECURITY_PROTOCOL", "FRESHET_SASL_MECHANISM", "FRESHET_SASL_USERNAME",
                     "FRESHET_SASL_PASSWORD"):  # the secured cluster's, while its fixture lives
        monkeypatch.delenv(variable, raising=False)
    client = TestClient(create_app(Collector(broker.bootstrap)))
    assert "the broker has no authorizer" in detail(client.get("/api/security/acls"), 400)
    assert "SECURITY_DISABLED" in detail(client.post("/api/security/acls", json={
        "principal": "User:x", "resource_type": "topic", "resource_name": "t", "operation": "READ"}), 400)
