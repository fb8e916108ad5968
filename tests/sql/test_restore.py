"""Restoring stored persistent queries (``freshet sql --serve`` after a restart): one its stored definition can no
longer start is marked ERROR with its reason in one line, and the others still start; a bug of ours is raised, not
taken for the query's fault (the query stays RUNNING, for the next restore)."""

import pytest

from freshet.sql.catalog import Catalog, Definition
from freshet.testing.topics import create_topic


def test_a_stored_query_that_cannot_start_is_marked_error_and_a_bug_is_raised(own_broker, spark, monkeypatch):
    from freshet.sql.session import SqlSession

    users, out = "restore-users", "restore-out"
    for name in (users, out):
        create_topic(own_broker.bootstrap, name, 1)
    catalog = Catalog(own_broker.bootstrap)
    # a table whose definition names no columns: Spark cannot resolve the key the query groups it by
    catalog.put(Definition("table", "r_users", users, "json", key="id"))
    stored = {"kind": "table", "sink": "broken", "topic": out, "status": "RUNNING", "keys": ["id"],
              "checkpoint": "/nonexistent/checkpoint"}
    catalog.put_query("CTAS_BROKEN_1", dict(stored, id="CTAS_BROKEN_1", sql="CREATE TABLE broken AS SELECT id, "
                                                                            "count(*) AS n FROM r_users GROUP BY id"))
    catalog.put_query("CTAS_BROKEN_2", dict(stored, id="CTAS_BROKEN_2", sql="CREATE TABLE broken AS SELEC id"))
    catalog.put_query("CTAS_BROKEN_3", {"id": "CTAS_BROKEN_3", "status": "RUNNING", "sql": "CREATE TABLE x AS "
                                                                                         "SELECT 1"})
    session = SqlSession(own_broker.bootstrap, spark)
    try:
        assert session.restore_queries() == []
    finally:
        session.close()
    records = Catalog(own_broker.bootstrap).queries()
    for query_id, says in (("CTAS_BROKEN_1", "id"), ("CTAS_BROKEN_2", "SELEC"), ("CTAS_BROKEN_3", "'kind'")):
        record = records[query_id]
        assert record["status"] == "ERROR" and says in record["error"] and "\n" not in record["error"], record

    # a bug while starting one (here: building its DataFrame) is no fault of the query's: raised, the query kept
    catalog.put_query("CTAS_FINE_1", dict(stored, id="CTAS_FINE_1", sql="CREATE TABLE fine AS SELECT id, count(*) "
                                                                        "AS n FROM r_users GROUP BY id"))
    monkeypatch.setattr(SqlSession, "dataframe", lambda *_args, **_kw: {}["a bug"])
    session = SqlSession(own_broker.bootstrap, spark)
    try:
        with pytest.raises(KeyError, match="a bug"):
            session.restore_queries()
    finally:
        session.close()
    assert Catalog(own_broker.bootstrap).queries()["CTAS_FINE_1"]["status"] == "RUNNING"
