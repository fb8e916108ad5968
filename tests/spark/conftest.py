import pytest



@pytest.fixture(scope="session")
def spark():
    """One SparkSession for every Spark test (start-up costs ~10 s on 2 cores)."""
    from freshet.spark import session

    s = session("freshet-tests", shuffle_partitions=2)
    yield s
    s.stop()
