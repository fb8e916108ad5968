"""Authentication, authorization and encryption with real clients: SASL PLAIN and SCRAM, TLS and mutual TLS,
ACLs on every API family, users managed over the protocol, brute force refused, sessions that expire."""

import os
import socket
import ssl
import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from freshet.local import BrokerProcess
from freshet.testing.cli import freshet
from freshet.testing.raw_kafka import RawConnection

ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")
MALLORY = ("mallory", "mallory-secret")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    r = freshet("security", "init", "--dir", str(d), "--client", "alice")
    assert r.returncode == 0, r.stderr
    other = tmp_path_factory.mktemp("other-ca")
    assert freshet("security", "init", "--dir", str(other)).returncode == 0
    return d, other


@pytest.fixture(scope="module")
def secured(tmp_path_factory, certs):
    """A broker with SASL_PLAINTEXT, SASL_SSL, SSL (client certificates required) and PLAINTEXT listeners."""
    d, _ = certs
    data = tmp_path_factory.mktemp("secured") / "data"
    for user, password in (ADMIN, ALICE, MALLORY):
        r = freshet("users", "add", user, "--password-stdin", "--data-dir", str(data), input=password + "\n")
        assert r.returncode == 0, r.stderr
    b = BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT", "SASL_SSL", "SSL", "PLAINTEXT"], extra_args=[
        "--super-user", "User:admin", "--ssl-certfile", str(d / "broker.pem"), "--ssl-keyfile", str(d / "broker-key.pem"),
        "--ssl-cafile", str(d / "ca.pem"), "--ssl-client-auth", "requested", "--max-failed-authentications", "1000"])
    b.start()
    b.certs = d
    yield b
    b.close()


def sasl(b, user, mechanism="SCRAM-SHA-256", tls=False, **extra):
    protocol = "SASL_SSL" if tls else "SASL_PLAINTEXT"
    conf = {"bootstrap.servers": b.bootstrap_for(protocol), "security.protocol": protocol,
            "sasl.mechanism": mechanism, "sasl.username": user[0], "sasl.password": user[1], "log_level": 0}
    if tls:
        conf["ssl.ca.location"] = str(b.certs / "ca.pem")
    return {**conf, **extra}


@pytest.fixture(scope="module")
def admin(secured):
    return AdminClient(sasl(secured, ADMIN))


def allow(admin, *bindings):
    for future in admin.create_acls([AclBinding(*b) for b in bindings]).values():
        future.result(10)


def topic(admin, name, partitions=1):
    admin.create_topics([NewTopic(name, partitions)])[name].result(10)
    return name


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_each_mechanism_authenticates_and_the_records_flow(secured, admin, mechanism):
    name = topic(admin, f"mech-{mechanism.lower()}")
    p = Producer(sasl(secured, ADMIN, mechanism))
    p.produce(name, b"secret")
    assert p.flush(10) == 0
    c = Consumer(sasl(secured, ADMIN, mechanism, **{"group.id": f"g-{mechanism}", "auto.offset.reset": "earliest"}))
    c.subscribe([name])
    got = None
    deadline = time.monotonic() + 15
    while got is None and time.monotonic() < deadline:
        m = c.poll(0.5)
        got = m.value() if m is not None and m.error() is None else None
    c.close()
    assert got == b"secret"


def _sasl_frames(conn, mechanism, tokens):
    """SaslHandshake then SaslAuthenticate for each token; the answers."""
    hs = conn.request(17, 1, {"mechanism": mechanism})
    answers = [hs]
    for token in tokens:
        answers.append(conn.request(36, 2, {"auth_bytes": token}))
    return answers


def test_wrong_password_unknown_user_and_unknown_mechanism_are_refused(secured):
    bootstrap = secured.bootstrap_for("SASL_PLAINTEXT")
    with RawConnection(bootstrap) as conn:
        hs = conn.request(17, 1, {"mechanism": "GSSAPI"})
        assert hs.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(hs.mechanisms) == {"SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"}
    for token in (b"\0alice\0wrong", b"\0nobody\0alice-secret", b"not a plain token"):
        with RawConnection(bootstrap) as conn:
            _, answer = _sasl_frames(conn, "PLAIN", [token])
            assert answer.error_code == ErrorCode.sasl_authentication_failed
            assert conn.is_closed_by_peer()  # Kafka closes after a failed authentication
    bad = AdminClient(sasl(secured, ("alice", "wrong")))
    with pytest.raises(KafkaException):
        bad.list_topics(timeout=3)


def test_requests_before_authentication_close_the_connection(secured):
    with RawConnection(secured.bootstrap_for("SASL_PLAINTEXT")) as conn:
        versions = conn.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert versions.error_code == ErrorCode.none  # ApiVersions is allowed before SASL
        conn.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                             "include_topic_authorized_operations": False}, expect_response=False)
        assert conn.is_closed_by_peer()


def test_plaintext_to_a_tls_port_and_untrusted_or_expired_certificates_fail(secured, certs):
    d, other = certs
    # a Kafka request in plaintext to the TLS port: no answer, the connection is closed
    with socket.create_connection(("127.0.0.1", secured.ports["SASL_SSL"]), timeout=5) as raw:
        raw.sendall(struct.pack(">ihhih", 10, 18, 0, 1, 0))
        try:
            answer = raw.recv(100)
        except ConnectionResetError:
            answer = b""
        assert not answer.startswith(struct.pack(">i", 10))  # no Kafka answer: at most a TLS alert, then closed
    untrusted = AdminClient({**sasl(secured, ADMIN, tls=True), "ssl.ca.location": str(other / "ca.pem")})
    with pytest.raises(KafkaException):
        untrusted.list_topics(timeout=3)
    trusted = AdminClient(sasl(secured, ADMIN, tls=True))
    assert "__consumer_offsets" in trusted.list_topics(timeout=10).topics
    # an expired client certificate is refused by the TLS handshake (client certificates are verified)
    from freshet.cli.security_cmd import _issue, _write
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    ca_cert = x509.load_pem_x509_certificate((d / "ca.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((d / "ca-key.pem").read_bytes(), None)
    key, cert = _issue("old", ca_key, ca_cert, days=1, client=True, start_days_ago=10)
    _write(str(d), "client-old", key, cert)
    context = ssl.create_default_context(cafile=str(d / "ca.pem"))
    context.load_cert_chain(str(d / "client-old.pem"), str(d / "client-old-key.pem"))
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(struct.pack(">ihhih", 10, 18, 0, 1, 0))
                if not tls.recv(4):
                    raise ConnectionError("closed")


def test_mutual_tls_principal_is_the_certificate_subject(secured, admin, certs):
    d, _ = certs
    name = topic(admin, "mtls-topic")
    conf = {"bootstrap.servers": secured.bootstrap_for("SSL"), "security.protocol": "SSL",
            "ssl.ca.location": str(d / "ca.pem"), "ssl.certificate.location": str(d / "client-alice.pem"),
            "ssl.key.location": str(d / "client-alice-key.pem"), "log_level": 0}
    p = Producer({**conf, "message.timeout.ms": 3000})
    p.produce(name, b"x")
    p.flush(5)
    assert name not in AdminClient(conf).list_topics(timeout=5).topics  # no ACL: hidden, not writable
    allow(admin, (ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:CN=alice", "*", AclOperation.WRITE,
                  AclPermissionType.ALLOW))
    p = Producer(conf)
    p.produce(name, b"by certificate")
    assert p.flush(10) == 0


def test_acls_for_every_api_family(secured, admin):
    """Denied before the ACL exists, allowed after: the table a user would check, family by family."""
    alice = sasl(secured, ALICE)
    a_admin = AdminClient(alice)
    name = topic(admin, "acl-orders", 2)
    p = Producer(sasl(secured, ADMIN))
    for i in range(10):
        p.produce(name, b"%d" % i, partition=i % 2)
    p.flush(10)

    # metadata: hidden until DESCRIBE
    assert name not in a_admin.list_topics(timeout=5).topics
    allow(admin, (ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.DESCRIBE,
                  AclPermissionType.ALLOW))
    assert name in a_admin.list_topics(timeout=5).topics

    # produce: TOPIC_AUTHORIZATION_FAILED until WRITE
    errors = []
    p = Producer({**alice, "message.timeout.ms": 3000})
    p.produce(name, b"denied", on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert errors and errors[0] is not None and errors[0].code() == 29  # TOPIC_AUTHORIZATION_FAILED
    allow(admin, (ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.WRITE,
                  AclPermissionType.ALLOW))
    p = Producer(alice)
    p.produce(name, b"allowed", partition=0)
    assert p.flush(10) == 0

    # consume in a group: needs READ on the group and on the topic
    def consume_one(group):
        c = Consumer({**alice, "group.id": group, "auto.offset.reset": "earliest"})
        c.subscribe([name])
        try:
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None:
                    return m.error().code() if m.error() else "record"
            return None
        finally:
            c.close()

    assert consume_one("alice-group") == 30  # GROUP_AUTHORIZATION_FAILED
    allow(admin, (ResourceType.GROUP, "alice-", ResourcePatternType.PREFIXED, "User:alice", "*", AclOperation.READ,
                  AclPermissionType.ALLOW))
    assert consume_one("alice-group") == 29  # now the topic: TOPIC_AUTHORIZATION_FAILED
    allow(admin, (ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                  AclPermissionType.ALLOW))
    assert consume_one("alice-group") == "record"

    # create / delete topics and configs
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        a_admin.create_topics([NewTopic("alice-new", 1)])["alice-new"].result(10)
    allow(admin, (ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED, "User:alice", "*", AclOperation.ALL,
                  AclPermissionType.ALLOW))
    a_admin.create_topics([NewTopic("alice-new", 1)])["alice-new"].result(10)
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        list(a_admin.describe_configs([ConfigResource(ResourceType.TOPIC, "mech-plain")]).values())[0].result(10)
    list(a_admin.describe_configs([ConfigResource(ResourceType.TOPIC, "alice-new")]).values())[0].result(10)
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        a_admin.delete_topics([name])[name].result(10)
    a_admin.delete_topics(["alice-new"])["alice-new"].result(10)

    # deny wins over allow
    allow(admin, (ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.WRITE,
                  AclPermissionType.DENY))
    errors.clear()
    p = Producer({**alice, "message.timeout.ms": 3000})
    p.produce(name, b"denied again", on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert errors[0] is not None and errors[0].code() == 29

    # transactions: TRANSACTIONAL_ID_AUTHORIZATION_FAILED until WRITE on the id
    out = topic(admin, "alice-tx-out")
    tp = Producer({**alice, "transactional.id": "alice-txn"})
    with pytest.raises(KafkaException, match="(?i)transactional.?id.?authorization"):
        tp.init_transactions(10)
    allow(admin, (ResourceType.TRANSACTIONAL_ID, "alice-txn", ResourcePatternType.LITERAL, "User:alice", "*",
                  AclOperation.WRITE, AclPermissionType.ALLOW))
    tp = Producer({**alice, "transactional.id": "alice-txn"})
    tp.init_transactions(10)
    tp.begin_transaction()
    tp.produce(out, b"in a transaction")
    tp.commit_transaction(10)

    # cluster: the ACL APIs need CLUSTER rights; DescribeCluster answers anyone, as Kafka does (no operations)
    with RawConnection(secured.bootstrap_for("SASL_PLAINTEXT")) as conn:
        assert _sasl_frames(conn, "PLAIN", [b"\0alice\0alice-secret"])[1].error_code == ErrorCode.none
        described = conn.request(60, 0, {"include_cluster_authorized_operations": True})
        assert (described.error_code, described.cluster_authorized_operations) == (ErrorCode.none, 0)
        listed = conn.request(16, 4, {"states_filter": []})  # groups alice may describe only
        assert {g.group_id for g in listed.groups} <= {g for g in ("alice-group",)}
    with pytest.raises(KafkaException):
        for f in a_admin.create_acls([AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:alice",
                                                 "*", AclOperation.ALL, AclPermissionType.ALLOW)]).values():
            f.result(10)

    # share groups: READ on the group (alice may read groups named alice-...) and the topic
    def share_poll(group):
        share = ShareConsumer({**alice, "group.id": group})
        share.subscribe([name])
        try:
            deadline = time.monotonic() + 6
            while time.monotonic() < deadline:
                try:
                    got = [m for m in share.poll(0.5) if m.error() is None]
                except KafkaException:
                    return []
                if got:
                    return got
            return []
        finally:
            share.close()

    allow(admin, (ResourceType.GROUP, "bob-queue", ResourcePatternType.LITERAL, "User:*", "*", AclOperation.READ,
                  AclPermissionType.DENY))
    assert share_poll("bob-queue") == []
    from freshet.client.queue import set_group_configs

    os.environ.update({"FRESHET_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "FRESHET_SASL_MECHANISM": "PLAIN",
                       "FRESHET_SASL_USERNAME": ADMIN[0], "FRESHET_SASL_PASSWORD": ADMIN[1]})
    try:
        set_group_configs(secured.bootstrap_for("SASL_PLAINTEXT"), "alice-queue", {"share.auto.offset.reset": "earliest"})
    finally:
        for k in ("FRESHET_SECURITY_PROTOCOL", "FRESHET_SASL_MECHANISM", "FRESHET_SASL_USERNAME",
                  "FRESHET_SASL_PASSWORD"):
            os.environ.pop(k)
    assert share_poll("alice-queue")


def test_acls_survive_a_restart_and_are_listed_and_removed_from_the_cli(secured, admin, certs):
    env = {"FRESHET_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "FRESHET_SASL_MECHANISM": "SCRAM-SHA-512",
           "FRESHET_SASL_USERNAME": ADMIN[0], "FRESHET_SASL_PASSWORD": ADMIN[1],
           "FRESHET_BOOTSTRAP": secured.bootstrap_for("SASL_PLAINTEXT")}
    r = freshet("acl", "add", "--principal", "User:carol", "--operation", "read", "--operation", "describe",
                "--topic", "carol-", "--prefixed", env=env)
    assert r.returncode == 0, r.stderr
    secured.restart()
    listed = freshet("acl", "list", "--principal", "User:carol", env=env)
    assert listed.returncode == 0, listed.stderr
    assert sorted(listed.stdout.splitlines()) == [
        "ALLOW\tUser:carol\t*\tDESCRIBE\ttopic\tcarol-\tprefixed", "ALLOW\tUser:carol\t*\tREAD\ttopic\tcarol-\tprefixed"]
    removed = freshet("acl", "remove", "--topic", "carol-", "--prefixed", "--principal", "User:carol", env=env)
    assert removed.returncode == 0 and "2 ACLs removed" in removed.stderr
    assert freshet("acl", "list", "--principal", "User:carol", env=env).stdout == ""
    bad = freshet("acl", "add", "--principal", "carol", "--operation", "read", "--topic", "x", env=env)
    assert bad.returncode == 1 and "principal" in bad.stderr.lower()
    for args in (("security", "init", "--dir", "/proc/no-such-dir"),
                 ("users", "add", "x", "--password", "p", "--data-dir", "/proc/no-such-dir")):
        r = freshet(*args)
        assert r.returncode == 1 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, r


def test_users_managed_over_the_protocol(secured, admin):
    env = {"FRESHET_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "FRESHET_SASL_MECHANISM": "PLAIN",
           "FRESHET_SASL_USERNAME": ADMIN[0], "FRESHET_SASL_PASSWORD": ADMIN[1],
           "FRESHET_BOOTSTRAP": secured.bootstrap_for("SASL_PLAINTEXT")}
    r = freshet("users", "add", "dave", "--password-stdin", "--mechanism", "SCRAM-SHA-512", input="dave-pw\n", env=env)
    assert r.returncode == 0, r.stderr
    assert "dave\tSCRAM-SHA-512 (4096 iterations)" in freshet("users", "list", env=env).stdout
    AdminClient(sasl(secured, ("dave", "dave-pw"), "SCRAM-SHA-512")).list_topics(timeout=5)  # authenticated
    store = (secured.data_dir + "/security/scram-credentials.json")
    assert "dave-pw" not in open(store).read()  # salted and hashed only
    assert freshet("users", "delete", "dave", env=env).returncode == 0
    with pytest.raises(KafkaException):
        AdminClient(sasl(secured, ("dave", "dave-pw"), "SCRAM-SHA-512")).list_topics(timeout=3)
    missing = freshet("users", "delete", "dave", env=env)
    assert missing.returncode == 1 and "no user" in missing.stderr
    with RawConnection(secured.bootstrap_for("PLAINTEXT")) as conn:  # ANONYMOUS: not allowed to change users
        r = conn.request(51, 0, {"deletions": [], "upsertions": [
            {"name": "eve", "mechanism": 1, "iterations": 4096, "salt": b"s", "salted_password": b"p"}]})
        assert r.results[0].error_code == ErrorCode.cluster_authorization_failed


def test_bad_credential_changes_are_refused_and_change_nothing(secured):
    with RawConnection(secured.bootstrap_for("SASL_PLAINTEXT")) as conn:
        answers = _sasl_frames(conn, "PLAIN", [b"\0admin\0admin-secret"])
        assert answers[1].error_code == ErrorCode.none
        before = open(secured.data_dir + "/security/scram-credentials.json").read()
        r = conn.request(51, 0, {"deletions": [{"name": "nobody", "mechanism": 1}], "upsertions": [
            {"name": "few", "mechanism": 1, "iterations": 10, "salt": b"s", "salted_password": b"p"},
            {"name": "odd", "mechanism": 7, "iterations": 4096, "salt": b"s", "salted_password": b"p"},
            {"name": "twice", "mechanism": 1, "iterations": 4096, "salt": b"s", "salted_password": b"p"},
            {"name": "twice", "mechanism": 1, "iterations": 4096, "salt": b"t", "salted_password": b"q"}]})
        assert {x.user: x.error_code for x in r.results} == {
            "nobody": ErrorCode.resource_not_found, "few": ErrorCode.unacceptable_credential,
            "odd": ErrorCode.unsupported_sasl_mechanism, "twice": ErrorCode.duplicate_resource}
        assert open(secured.data_dir + "/security/scram-credentials.json").read() == before
        described = conn.request(50, 0, {"users": [{"name": "alice"}, {"name": "ghost"}]})
        assert [(x.user, x.error_code) for x in described.results] == [
            ("alice", ErrorCode.none), ("ghost", ErrorCode.resource_not_found)]


def test_guessing_passwords_is_refused_after_the_limit_even_with_the_right_one(tmp_path):
    data = tmp_path / "data"
    freshet("users", "add", "victim", "--password", "right", "--data-dir", str(data))
    freshet("users", "add", "bystander", "--password", "bystander-pw", "--data-dir", str(data))
    with BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT"],
                       extra_args=["--max-failed-authentications", "5"]) as b:
        for i in range(5):
            with RawConnection(b.bootstrap) as conn:
                assert _sasl_frames(conn, "PLAIN", [b"\0victim\0guess%d" % i])[1].error_code == \
                    ErrorCode.sasl_authentication_failed
        with RawConnection(b.bootstrap) as conn:
            answer = _sasl_frames(conn, "PLAIN", [b"\0victim\0right"])[1]
            assert answer.error_code == ErrorCode.sasl_authentication_failed
            assert "too many failed" in answer.error_message
        assert "its attempts from there are refused" in b.log_tail(50)
        with RawConnection(b.bootstrap) as conn:  # other users on the same host are not locked out
            assert _sasl_frames(conn, "PLAIN", [b"\0bystander\0bystander-pw"])[1].error_code == ErrorCode.none


def test_an_expired_session_is_closed_unless_the_client_reauthenticates(tmp_path):
    data = tmp_path / "data"
    freshet("users", "add", "u", "--password", "pw", "--data-dir", str(data))
    with BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT"],
                       extra_args=["--reauth-ms", "1500", "--super-user", "User:u"]) as b:
        with RawConnection(b.bootstrap) as conn:
            answers = _sasl_frames(conn, "PLAIN", [b"\0u\0pw"])
            assert answers[1].session_lifetime.total_seconds() == 1.5
            meta = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
            assert conn.request(3, 12, meta).cluster_id
            time.sleep(1.7)
            _sasl_frames(conn, "PLAIN", [b"\0u\0pw"])  # re-authenticated on the same connection
            assert conn.request(3, 12, meta).cluster_id
            time.sleep(1.7)
            conn.request(3, 12, meta, expect_response=False)  # expired, not renewed: closed
            assert conn.is_closed_by_peer()
        # librdkafka re-authenticates by itself (KIP-368): its connections are never closed for expiry
        closed_before = b.log_tail(1000).count("after its session expired")
        conf = {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": "u", "sasl.password": "pw", "log_level": 0}
        a = AdminClient(conf)
        a.create_topics([NewTopic("long-lived", 1)])["long-lived"].result(10)
        p = Producer(conf)
        for i in range(4):
            p.produce("long-lived", b"%d" % i)
            assert p.flush(10) == 0
            time.sleep(1.0)
        assert b.log_tail(1000).count("after its session expired") == closed_before


def test_refused_user_requests_name_each_user(secured):
    """As Kafka: a refused AlterUserScramCredentials / DescribeUserScramCredentials carries one result per user,
    each CLUSTER_AUTHORIZATION_FAILED with Kafka's message, and changes nothing."""
    store = secured.data_dir + "/security/scram-credentials.json"
    before = open(store).read()
    with RawConnection(secured.bootstrap_for("PLAINTEXT")) as conn:  # User:ANONYMOUS, no ACL for it
        altered = conn.request(51, 0, {"deletions": [{"name": "alice", "mechanism": 1}], "upsertions": [
            {"name": "eve", "mechanism": 1, "iterations": 4096, "salt": b"s", "salted_password": b"p"}]})
        assert [(r.user, r.error_code, r.error_message) for r in altered.results] == [
            ("alice", ErrorCode.cluster_authorization_failed, "Cluster authorization failed."),
            ("eve", ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")]
        described = conn.request(50, 0, {"users": [{"name": "alice"}, {"name": "ghost"}]})
        assert (described.error_code, described.error_message) == (ErrorCode.cluster_authorization_failed,
                                                                   "Cluster authorization failed.")
        assert [(r.user, r.error_code, r.error_message, r.credential_infos) for r in described.results] == [
            (user, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.", ())
            for user in ("alice", "ghost")]
    assert open(store).read() == before


def _acl(name, operation, permission=AclPermissionType.ALLOW, principal="User:ANONYMOUS"):
    return AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, principal, "*", operation, permission)


def _produce_error(bootstrap, name):
    """The delivery error code of one record produced to ``name`` (None: delivered)."""
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 5000, "log_level": 0})
    p.produce(name, b"x", on_delivery=lambda err, msg: errors.append(err.code() if err else None))
    p.flush(15)
    return errors[0]


def test_acl_apis_without_an_authorizer_answer_security_disabled(broker):
    """A plaintext broker has no authorizer unless asked (Kafka without authorizer.class.name)."""
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    for future in (*a.create_acls([_acl("t", AclOperation.READ)]).values(), *a.delete_acls([everything]).values()):
        with pytest.raises(KafkaException) as refused:
            future.result(10)
        assert refused.value.args[0].code() == KafkaError.SECURITY_DISABLED
    # (librdkafka drops DescribeAcls' error code and shows an empty list: the raw answers, with Kafka's message)
    disabled = (ErrorCode.security_disabled,
                "No Authorizer is configured on the broker (freshet broker start --authorizer)")
    with RawConnection(broker.bootstrap) as conn:
        created = conn.request(30, 2, {"creations": [{
            "resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:ANONYMOUS",
            "host": "*", "operation": 3, "permission_type": 3}]})
        assert (created.results[0].error_code, created.results[0].error_message) == disabled
        any_filter = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                      "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
        described = conn.request(29, 2, any_filter)
        assert (described.error_code, described.error_message, described.resources) == (*disabled, ())
        deleted = conn.request(31, 2, {"filters": [any_filter]})
        assert [(r.error_code, r.error_message) for r in deleted.filter_results] == [disabled]
    assert not os.path.exists(os.path.join(broker.data_dir, "security", "acls.json"))


def test_an_authorizer_on_a_plaintext_broker(tmp_path):
    """librdkafka's test 0081: --authorizer without any SASL listener; plaintext clients are User:ANONYMOUS."""
    with BrokerProcess(data_dir=str(tmp_path / "open"),
                       extra_args=["--authorizer", "--allow-everyone-if-no-acl-found"]) as b:
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        for name in ("closed", "open"):
            a.create_topics([NewTopic(name, 1)])[name].result(10)
        deny = _acl("closed", AclOperation.WRITE, AclPermissionType.DENY)
        for future in a.create_acls([deny]).values():
            future.result(10)
        listed = a.describe_acls(AclBindingFilter(ResourceType.TOPIC, "closed", ResourcePatternType.LITERAL, None,
                                                  None, AclOperation.ANY, AclPermissionType.ANY)).result(10)
        assert listed == [deny]
        assert _produce_error(b.bootstrap, "closed") == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert _produce_error(b.bootstrap, "open") is None  # no ACL names it: open to everyone
        b.restart()
        assert _produce_error(b.bootstrap, "closed") == KafkaError.TOPIC_AUTHORIZATION_FAILED
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        deleted = a.delete_acls([AclBindingFilter(ResourceType.TOPIC, "closed", ResourcePatternType.LITERAL, None,
                                                  None, AclOperation.ANY, AclPermissionType.ANY)])
        assert [f.result(10) for f in deleted.values()] == [[deny]]
        assert _produce_error(b.bootstrap, "closed") is None

    # without allow-everyone, ANONYMOUS may do only what an ACL allows (or everything as a super user)
    with BrokerProcess(data_dir=str(tmp_path / "shut"), extra_args=["--authorizer"]) as b:
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        with pytest.raises(KafkaException) as refused:
            for future in a.create_acls([_acl("t", AclOperation.READ)]).values():
                future.result(10)
        assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        with pytest.raises(KafkaException) as refused:
            a.create_topics([NewTopic("t", 1)])["t"].result(10)
        assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert not os.path.exists(os.path.join(b.data_dir, "security", "acls.json"))
        assert "t" not in a.list_topics(timeout=10).topics


def test_no_authorizer_beside_a_sasl_listener(tmp_path):
    """--no-authorizer turns ACLs off even where clients authenticate (Kafka without authorizer.class.name)."""
    data = tmp_path / "data"
    assert freshet("users", "add", "bob", "--password", "bob-pw", "--data-dir", str(data)).returncode == 0
    with BrokerProcess(data_dir=str(data), listeners=["SASL_PLAINTEXT"],
                       extra_args=["--no-authorizer", "--super-user", "User:bob"]) as b:
        assert "--super-user and --allow-everyone-if-no-acl-found have no effect" in b.log_tail(50)
        bob = {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
               "sasl.username": "bob", "sasl.password": "bob-pw", "log_level": 0}
        a = AdminClient(bob)
        a.create_topics([NewTopic("bobs", 1)])["bobs"].result(10)  # no ACLs, and none needed
        with pytest.raises(KafkaException) as refused:
            for future in a.create_acls([_acl("bobs", AclOperation.READ)]).values():
                future.result(10)
        assert refused.value.args[0].code() == KafkaError.SECURITY_DISABLED
        with RawConnection(b.bootstrap) as conn:  # clients still authenticate: a wrong password is refused
            assert _sasl_frames(conn, "PLAIN", [b"\0bob\0wrong"])[1].error_code == ErrorCode.sasl_authentication_failed


def _authorizer_config(admin_client):
    """authorizer.class.name as DescribeConfigs of broker 0 shows it: (value, read-only)."""
    resource = ConfigResource(ResourceType.BROKER, "0")
    (entries,) = [f.result(10) for f in admin_client.describe_configs([resource]).values()]
    entry = entries["authorizer.class.name"]
    return entry.value, entry.is_read_only


def test_authorizer_class_name_tells_acls_on_from_off(broker, secured, admin, tmp_path):
    """Kafka's authorizer.class.name, read-only: empty without an authorizer; with one, the name of Kafka's
    StandardAuthorizer, whose rules Freshet's follows (so tools reading it see ACLs on)."""
    standard = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer", True)
    assert _authorizer_config(AdminClient({"bootstrap.servers": broker.bootstrap})) == ("", True)
    assert _authorizer_config(admin) == standard  # on by default beside SASL listeners
    with BrokerProcess(data_dir=str(tmp_path / "d"), extra_args=["--authorizer", "--super-user", "User:ANONYMOUS"]) as b:
        a = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
        assert _authorizer_config(a) == standard
        altered = a.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
            ConfigEntry("authorizer.class.name", "", incremental_operation=AlterConfigOpType.SET)])])
        with pytest.raises(KafkaException) as refused:
            [f.result(10) for f in altered.values()]
        assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
        assert _authorizer_config(a) == standard
