import pytest


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession the Spark tests share (getOrCreate: the same as tests/spark's in one run)."""
    from freshet.spark import session

    s = session("freshet-tests", shuffle_partitions=2)
    yield s
    s.stop()


@pytest.fixture
def sql(broker, spark):
    """A SQL session on the shared broker and SparkSession; its push queries stopped after the test."""
    from freshet.sql.session import SqlSession

    s = SqlSession(broker.bootstrap, spark)
    yield s
    s.close()

