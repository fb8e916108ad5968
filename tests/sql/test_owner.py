"""The owner of persistent queries run over Spark Connect (``queries.Owner``): the serving process is a member of a
consumer group of its own while it lives; killed -9, the broker empties the group, and a sink of its queries (on the
Connect server) refuses its next batch, which stops the query there, and says so in the pipeline registry. The
whole of it over a real Connect server is in tests/spark/test_sql_remote.py."""

import signal
import subprocess
import sys

import pytest

from freshet.client.pipeline_registry import read_pipelines
from freshet.sql.queries import OwnerGone, SqlSink, owner_gone
from freshet.testing.polling import wait_for

OWNER = """
import sys, threading
from freshet.sql.queries import Owner
print(Owner(sys.argv[1]).group, flush=True)
threading.Event().wait()
"""


def test_a_killed_owner_stops_its_queries_sinks(broker):
    owner = subprocess.Popen([sys.executable, "-c", OWNER, broker.bootstrap], stdout=subprocess.PIPE, text=True)
    try:
        group = owner.stdout.readline().strip()
        assert group.startswith("__freshet_sql_owner-"), group
        assert not owner_gone(broker.bootstrap, group)
        sink = SqlSink(broker.bootstrap, "unused-topic", "sql|owner-test", [], None, owner=group,
                       query_id="CTAS_OWNER_TEST_1")
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(30)
    wait_for(lambda: owner_gone(broker.bootstrap, group), timeout=120, what="the owner's group emptied")
    with pytest.raises(OwnerGone, match="the process serving it is gone"):
        sink(None, 0)  # refused before the batch is read: nothing written
    stopped = read_pipelines(broker.bootstrap)["CTAS_OWNER_TEST_1"]
    assert stopped["status"] == "stopped" and "freshet sql --serve" in stopped["reason"]
