"""Fixtures every test package shares: a broker process, a broker of the test's own, topic names."""

import itertools
import os
import re

import pytest

from freshet.broker.wire.protocol import CHECKS_VARIABLE
from freshet.local import BrokerProcess, PostgresServer
from freshet.testing import class_archive

# every broker the tests start (they inherit the environment) refuses a handler's key that no version of its
# response has, instead of dropping it: typos in handlers fail tests
os.environ[CHECKS_VARIABLE] = "1"

# the ports of the servers the tests start (freshet.local.broker.free_port, inherited by the processes they start):
# at random in a range below the kernel's ephemeral one, which every outgoing connection draws from (a port picked
# there was taken by another before its server bound it: a controller, a broker, twice in fresh-clone runs), one
# slice of 2,500 ports per xdist worker
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0) % 5
os.environ["FRESHET_TEST_PORTS"] = f"{20_000 + 2_500 * _WORKER}-{22_499 + 2_500 * _WORKER}"

# every Spark driver the tests start (in process, `freshet run`, the Connect server: all through spark-submit)
# runs seconds to minutes on small data, where the C2 compiler's work never pays back: C1 alone costs ~45% less
# CPU (tests/spark/test_stateful.py, the JVM and everything else it starts: 40.7 -> 22.4 s). And each maps the
# run's archive of Spark's classes (freshet.testing.class_archive, made once per virtualenv by the first run):
# a JVM's start then costs ~half the CPU (a session and a small job: 11.5 -> 5.5 CPU-s). The serial collector
# suits their small heaps better than G1 with its concurrent threads (the timeline kill -9 test's two drivers:
# 15.0 -> 13.4 CPU-s). Pipelines that users run keep the JVM's defaults.
CLASS_ARCHIVE = class_archive.archive_path()
TEST_JVM_OPTIONS = f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC {class_archive.java_options(CLASS_ARCHIVE)}"
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)


def pytest_configure(config):
    """The controller (or a run without workers) makes the class archive in the background if it is missing:
    JVMs that start before it is there load their classes as usual."""
    if not hasattr(config, "workerinput"):
        class_archive.make_in_background(CLASS_ARCHIVE)


# FRESHET_TEST_TIMELINE=FILE: each test's worker, start and end (wall and this worker's CPU) as a JSON line, to see
# how `make test`'s workers fill their time (which tests run beside which, and what runs alone at the end)
TIMELINE = os.environ.get("FRESHET_TEST_TIMELINE")
if TIMELINE:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        import json
        import time

        start, cpu = time.time(), os.times()
        yield
        end, cpu_end = time.time(), os.times()
        used = sum(cpu_end[:4]) - sum(cpu[:4])  # this worker and the children it waited for
        with open(TIMELINE, "a") as f:
            f.write(json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": item.nodeid,
                                "start": round(start, 3), "end": round(end, 3), "cpu": round(used, 2)}) + "\n")


@pytest.fixture(scope="session")
def postgres():
    """One throwaway PostgreSQL (wal_level=logical) on 127.0.0.1 for the whole run."""
    with PostgresServer() as pg:
        yield pg


@pytest.fixture
def db(postgres):
    """An autocommit connection and a fresh schema of the test's own: (conn, schema)."""
    import uuid

    import psycopg2

    schema = "s" + uuid.uuid4().hex[:8]
    conn = psycopg2.connect(postgres.dsn)
    conn.autocommit = True
    conn.cursor().execute(f"CREATE SCHEMA {schema}")
    yield conn, schema
    conn.close()


# Many tests write records with old timestamps (1970, 2023...): with the default 7-day retention the
# cleaner would delete them mid-test. Test brokers run it hourly; the retention tests start their own.
NO_CLEANER = ["--cleaner-interval-ms", "3600000"]
# KIP-848 groups heartbeat every 5 s and expire members after 45 s by default: tests need quicker failover
QUICK_GROUPS = ["--consumer-heartbeat-interval-ms", "500", "--consumer-session-timeout-ms", "6000"]


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """One broker for the tests that only add topics of their own. Its data and log stay in pytest's base
    directory (the last three runs are kept): a failure of a test on it can be read in the broker's log."""
    directory = tmp_path_factory.mktemp("shared-broker")
    with BrokerProcess(data_dir=str(directory / "data"), extra_args=NO_CLEANER + QUICK_GROUPS, metrics=True) as b:
        yield b


@pytest.fixture
def own_broker(tmp_path):
    """A broker of the test's own, for restarts and crashes."""
    b = BrokerProcess(data_dir=str(tmp_path / "data"), extra_args=NO_CLEANER + QUICK_GROUPS)
    b.start()
    yield b
    b.close()


_topic_counter = itertools.count()


@pytest.fixture
def topic_name(request):
    """A topic name unique to the test (and to each parameter of it)."""
    base = re.sub(r"[^a-zA-Z0-9.-]+", "-", request.node.name)[:180]
    return f"t-{base}-{next(_topic_counter)}"


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups (else every worker gets Spark tests)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test` runs four workers), the tests of tests/spark that use a shared SparkSession
    go to one worker (group "spark"), so one session serves them all, those of tests/sql to another ("spark-sql",
    a session of its own: together they were the longest worker's ~18 minutes under load); every test that uses
    the Spark cluster (directly, or as the `cluster` engine of a scenario) goes to a third ("spark-cluster"), so
    one cluster serves them. xdist starts the largest groups first, one a worker; the rest share the workers."""
    grouped = set()
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        engine = callspec.params.get("engine") if callspec else None
        if "spark_cluster" in names or engine == "cluster":
            item.add_marker(pytest.mark.xdist_group("spark-cluster"))
        elif names & {"spark", "engine"}:
            group = "spark-sql" if item.nodeid.startswith("tests/sql/") else "spark"
            item.add_marker(pytest.mark.xdist_group(group))
        else:
            continue
        grouped.add(item.nodeid)
    # xdist hands the ungrouped tests out in collection order, one or two at a time, to whichever worker is free:
    # the long ones (Spark drivers of their own, demos, kill -9 loops) go first, the longest first, so that none
    # of them starts near the end of the run and keeps one worker busy after the others have finished
    def rank(item) -> int:
        if item.nodeid in grouped:
            return -1
        return next((i for i, prefix in enumerate(LONG_FIRST) if item.nodeid.startswith(prefix)), len(LONG_FIRST))

    items.sort(key=rank)


# ungrouped tests that take a minute or more each on two busy cores (Spark drivers of their own, demos, kill -9
# loops): the slowest of a run measured with --durations=0 (issue #51)
LONG_FIRST = (
    "tests/integration/cep/",
    "tests/dashboard/test_browser",
    "tests/spark/",
    "tests/sql/",
    "tests/integration/cli/test_es_cli.py",
    "tests/integration/cli/test_pipeline_stop.py",
    "tests/integration/eventsourcing/",
    "tests/integration/ingest/",
    "tests/reliability/test_crashes.py",
    "tests/replication/test_kill_leader.py",
    "tests/cdc/",
)
