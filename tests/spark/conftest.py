import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))

from freshet.testing import BrokerProcess  # noqa: E402
from freshet.testing.postgres import PostgresServer  # noqa: E402


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for every Spark test (start-up costs ~10 s on 2 cores)."""
    from freshet.spark import session

    s = session("freshet-tests", shuffle_partitions=2)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def broker():
    with BrokerProcess() as b:
        yield b


@pytest.fixture(scope="session")
def postgres():
    with PostgresServer() as pg:
        yield pg


@pytest.fixture
def topic_name(request):
    return f"spark-{request.node.name[:40].replace('_', '-').replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:6]}"
