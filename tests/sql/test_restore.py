"""Restoring stored persistent queries (``freshet sql --serve`` after a restart): one that can no longer start is
marked ERROR with its reason, and the others still start; it never takes the serving process down."""

from freshet.sql.catalog import Catalog, Definition
from freshet.testing.topics import create_topic


def test_a_stored_query_spark_refuses_is_marked_error_and_restore_goes_on(own_broker, spark):
    from freshet.sql.session import SqlSession

    users, out = "restore-users", "restore-out"
    for name in (users, out):
        create_topic(own_broker.bootstrap, name, 1)
    catalog = Catalog(own_broker.bootstrap)
    # a table whose definition names no columns: Spark cannot resolve the key the query groups it by
    catalog.put(Definition("table", "r_users", users, "json", key="id"))
    catalog.put_query("CTAS_BROKEN_1", {"id": "CTAS_BROKEN_1", "kind": "table", "sink": "broken", "topic": out,
                                        "status": "RUNNING", "sql": "CREATE TABLE broken AS SELECT id, count(*) AS n "
                                                                    "FROM r_users GROUP BY id EMIT CHANGES"})
    session = SqlSession(own_broker.bootstrap, spark)
    try:
        assert session.restore_queries() == []
    finally:
        session.close()
    record = Catalog(own_broker.bootstrap).queries()["CTAS_BROKEN_1"]
    assert record["status"] == "ERROR" and "id" in record["error"] and "\n" not in record["error"]
