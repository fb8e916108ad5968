"""``freshet acl list`` tells a broker without an authorizer (librdkafka shows its SECURITY_DISABLED answer to
DescribeAcls as an empty list) from one that has no ACLs yet."""

from freshet.local import BrokerProcess
from freshet.testing.cli import freshet, one_line_error


def test_acl_list_without_an_authorizer_says_so(broker):
    listed = freshet(broker, "acl", "list")
    one_line_error(listed, "the broker has no authorizer", "freshet broker start --authorizer")
    assert listed.stdout == ""
    one_line_error(freshet(broker, "acl", "list", "--topic", "orders"), "the broker has no authorizer")


def test_acl_list_with_an_authorizer_and_no_acls_is_empty_then_lists_them(tmp_path):
    with BrokerProcess(data_dir=str(tmp_path / "d"), extra_args=["--authorizer", "--super-user", "User:ANONYMOUS"]) as b:
        empty = freshet(b, "acl", "list")
        assert (empty.returncode, empty.stdout, empty.stderr) == (0, "", "")
        added = freshet(b, "acl", "add", "--principal", "User:alice", "--operation", "read", "--topic", "orders")
        assert added.returncode == 0, added.stderr
        listed = freshet(b, "acl", "list")
        assert listed.returncode == 0 and listed.stdout == added.stdout and "User:alice" in listed.stdout
        narrow = freshet(b, "acl", "list", "--topic", "nothing-here")
        assert (narrow.returncode, narrow.stdout) == (0, "")
