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


@pytest.fixture(scope="session")
def connect_url(tmp_path_factory):
    """A Spark Connect server of its own (local[2], no cluster: the SQL tests need a server, not workers), its
    Python workers this environment's; its URL. Stopped after the tests."""
    import os
    import signal
    import socket
    import subprocess
    import sys

    from freshet.local.spark_cluster import CONNECT_CLASS, connect_server_conf, spark_home
    from freshet.testing.polling import wait_for

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    port = free_port()
    home = spark_home()
    jar = max(os.path.join(home, "jars", j) for j in os.listdir(os.path.join(home, "jars"))
              if j.startswith("spark-connect_"))
    conf = [f"--conf={k}={v}" for k, v in connect_server_conf(port, "127.0.0.1", 2, free_port()).items()]
    log = tmp_path_factory.mktemp("connect") / "connect.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([os.path.join(home, "bin", "spark-submit"), "--class", CONNECT_CLASS, "--master",
                                   "local[2]", *conf, jar], stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True,
                                  env={**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": "127.0.0.1",
                                       "PYSPARK_PYTHON": sys.executable})

    def listening() -> bool:
        assert server.poll() is None, f"the Spark Connect server ended: {log.read_text()[-2000:]}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    try:
        wait_for(listening, 300, "the Spark Connect server to listen")
        yield f"sc://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(30)
