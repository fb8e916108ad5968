"""A three-broker cluster (three controllers, three brokers, real processes on 127.0.0.1) for the tests of
issue #46's control plane."""

import pytest

from freshet.local.cluster import LocalCluster

DEADLINE = 120.0  # generous: two cores shared by many test runs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One cluster for a module's tests that do not break it."""
    with LocalCluster(3, directory=str(tmp_path_factory.mktemp("cluster"))) as c:
        yield c


@pytest.fixture
def own_cluster(tmp_path):
    """A cluster of the test's own, for tests that kill, pause or restart its processes."""
    with LocalCluster(3, directory=str(tmp_path / "cluster")) as c:
        yield c


def admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 30000})
