import pytest

from freshet.testing.postgres import PostgresServer


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for every Spark test (start-up costs ~10 s on 2 cores)."""
    from freshet.spark import session

    s = session("freshet-tests", shuffle_partitions=2)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def postgres():
    with PostgresServer() as pg:
        yield pg
