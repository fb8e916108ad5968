"""Kafka's authorizeByResourceType: may a principal do an operation on *some* resource of a type, whether or not
one exists yet (what an idempotent producer needs: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic)."""

from freshet.broker.security.acls import (
    ALL,
    ALLOW,
    DENY,
    LITERAL,
    PREFIXED,
    READ,
    TOPIC,
    WRITE,
    AclBinding,
    Authorizer,
)


def authorizer(tmp_path, *bindings, allow_if_none=False):
    a = Authorizer(str(tmp_path / "acls.json"), {"User:admin"}, allow_if_none)
    a.bindings = set(bindings)
    return a


def binding(name, pattern=LITERAL, principal="User:cdc", operation=WRITE, permission=ALLOW):
    return AclBinding(TOPIC, name, pattern, principal, "*", operation, permission)


def test_a_prefixed_allow_counts_before_any_topic_exists(tmp_path):
    a = authorizer(tmp_path, binding("cdc.", PREFIXED))
    assert a.authorize_by_resource_type("User:cdc", "127.0.0.1", WRITE, TOPIC)
    assert not a.authorize_by_resource_type("User:other", "127.0.0.1", WRITE, TOPIC)
    assert not a.authorize_by_resource_type("User:cdc", "127.0.0.1", 6, TOPIC)  # DELETE: not allowed anywhere


def test_all_implies_write_and_read_does_not(tmp_path):
    assert authorizer(tmp_path, binding("t", operation=ALL)).authorize_by_resource_type("User:cdc", "h", WRITE, TOPIC)
    assert not authorizer(tmp_path, binding("t", operation=READ)).authorize_by_resource_type("User:cdc", "h", WRITE,
                                                                                              TOPIC)


def test_denies_that_cover_the_allow_win(tmp_path):
    allow = binding("cdc.people", PREFIXED)
    for deny in (binding("*", permission=DENY), binding("cdc.", PREFIXED, permission=DENY)):
        assert not authorizer(tmp_path, allow, deny).authorize_by_resource_type("User:cdc", "h", WRITE, TOPIC)
    # a deny on one literal topic leaves the prefix allowed elsewhere
    assert authorizer(tmp_path, allow, binding("cdc.people.x", permission=DENY)).authorize_by_resource_type(
        "User:cdc", "h", WRITE, TOPIC)


def test_super_users_and_no_acls(tmp_path):
    assert authorizer(tmp_path).authorize_by_resource_type("User:admin", "h", WRITE, TOPIC)
    assert not authorizer(tmp_path).authorize_by_resource_type("User:cdc", "h", WRITE, TOPIC)
    assert authorizer(tmp_path, allow_if_none=True).authorize_by_resource_type("User:cdc", "h", WRITE, TOPIC)
