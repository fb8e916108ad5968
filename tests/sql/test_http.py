"""POST /sql on the dashboard: statements in, JSON lines out (ksqlDB's /query-stream shape), errors as 400."""

import json

from fastapi.testclient import TestClient

from freshet.dashboard.app import create_app
from freshet.dashboard.collector import Collector
from freshet.sql.http import SqlEndpoint

from .helpers import produce

T0 = 1_767_225_600_000


def client(broker, spark) -> TestClient:
    endpoint = SqlEndpoint(broker.bootstrap)
    endpoint._spark = spark  # the tests' one SparkSession
    return TestClient(create_app(Collector(broker.bootstrap), sql_endpoint=endpoint))


def test_a_push_query_streams_a_header_then_rows_as_json_lines(broker, spark, topic_name):
    produce(broker.bootstrap, topic_name, [{"user_id": f"u{i}", "n": i, "ts": T0 + i} for i in range(5)])
    name = f"http_{abs(hash(topic_name)) % 10**8}"
    script = (f"CREATE STREAM {name} (user_id STRING, n INT, ts BIGINT) WITH (topic='{topic_name}', format='json', "
              f"timestamp='ts'); SELECT user_id, n, ts FROM {name} WHERE n < 3 EMIT CHANGES LIMIT 3;")
    with client(broker, spark).stream("POST", "/sql", json={"sql": script,
                                                             "properties": {"auto.offset.reset": "earliest"}}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.iter_lines() if line]
    created, header, *rows = lines
    assert created["@type"] == "currentStatus" and created["commandStatus"]["status"] == "SUCCESS"
    assert header["columnNames"] == ["user_id", "n", "ts"] and header["columnTypes"] == ["string", "int", "timestamp"]
    assert header["queryId"].startswith("push_")
    assert sorted(rows) == [["u0", 0, "2026-01-01T00:00:00"], ["u1", 1, "2026-01-01T00:00:00.001000"],
                            ["u2", 2, "2026-01-01T00:00:00.002000"]]
    assert not spark.streams.active


def test_a_statement_that_cannot_run_is_a_400_with_line_and_column(broker, spark):
    r = client(broker, spark).post("/sql", json={"sql": "SHOW STREAMS;\nSELECT * FROM s EMIT CHANGES LIMIT 0"})
    assert r.status_code == 400
    assert r.json() == {"@type": "statement_error", "error_code": 40001, "line": 2, "column": 36,
                        "message": "expected a whole number of rows, at least 1, found '0'"}
    bad = client(broker, spark).post("/sql", json={"sql": "SHOW STREAMS", "properties": {"colour": "red"}})
    assert bad.status_code == 400 and "unknown property 'colour'" in bad.json()["message"]


def test_without_an_endpoint_there_is_no_sql(broker):
    r = TestClient(create_app(Collector(broker.bootstrap))).post("/sql", json={"sql": "SHOW STREAMS"})
    assert r.status_code == 404


class GeneralEndpoint(SqlEndpoint):
    def answer_now(self, text, properties=None):
        return None  # every request through the general path: the lines of a thread of its own


def test_a_pull_query_is_answered_at_once_with_the_general_paths_lines(tmp_path):
    import datetime
    from types import SimpleNamespace

    from freshet.sql.table_store import store_for

    store = store_for(SimpleNamespace(data_dir=str(tmp_path)))
    store.define("rpm", [("minute", "timestamp"), ("url", "string"), ("requests", "bigint")], ["minute", "url"])
    store.upsert("rpm", [(datetime.datetime(2026, 1, 1, 0, 1), "/a", 5)])
    endpoint = SqlEndpoint("127.0.0.1:9", data_dir=str(tmp_path))  # a pull query reaches no broker, no Spark
    fast, general = (TestClient(create_app(Collector("127.0.0.1:9"), sql_endpoint=e))
                     for e in (endpoint, GeneralEndpoint("127.0.0.1:9", data_dir=str(tmp_path))))
    for statement in ("SELECT * FROM rpm WHERE minute = '2026-01-01 00:01:00' AND url = '/a'",
                      "SELECT requests AS n FROM rpm WHERE url = '/b' AND minute = '2026-01-01 00:01:00';"):
        assert endpoint.answer_now(statement) is not None
        answers = [c.post("/sql", json={"sql": statement}) for c in (fast, general)]
        assert [(a.status_code, a.headers["content-type"], a.text) for a in answers[:1]] == \
            [(a.status_code, a.headers["content-type"], a.text) for a in answers[1:]]
    assert [json.loads(line) for line in answers[0].text.splitlines()] == [
        {"queryId": None, "columnNames": ["n"], "columnTypes": []}]
    assert endpoint.answer_now("SELECT * FROM rpm WHERE url = '/a'") is None  # not the whole key: Spark's
    assert endpoint.answer_now("SELECT * FROM rpm WHERE minute = '2026-01-01 00:01:00' AND url = '/a'",
                               {"auto.offset.reset": "latest"}) is None  # properties: checked by the general path
    store.close()


def test_a_body_the_route_reads_itself_is_refused_as_fastapis_model_refuses_it():
    """POST /sql reads the common body ({"sql": "...", "properties": {...}}) with json alone; any other body is
    refused (422) exactly as FastAPI refuses it against the model, and a good one reaches the endpoint as it was."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from freshet.dashboard.routers import sql as route

    class Echo:
        def answer_now(self, text, properties=None):
            return [{"queryId": None, "columnNames": ["sql", "properties"], "columnTypes": []}, [text, properties]]

    app = FastAPI()
    app.include_router(route.router)
    app.state.sql = Echo()
    model = FastAPI()  # the route as it was: the body a parameter of the model's type, validated by FastAPI

    @model.post("/sql")
    async def reference(body: route.SqlRequest):
        return body

    ours, theirs = TestClient(app), TestClient(model)
    as_json = {"content-type": "application/json"}
    for body, headers in (({"sql": 1}, {}), ({}, {}), ({"sql": "SELECT 1", "properties": {"a": 1}}, {}),
                          ({"sql": "x", "properties": [1]}, {}), ([1], {}), ("text", {}), (b"{not json", as_json),
                          (b"", as_json), (b'{"sql": "x"}', {}),  # no content type: not read as JSON, as FastAPI
                          (b'{"sql": "x"}', {"content-type": "text/plain"})):  # a form's: no SQL across sites
        sent = {"content": body, "headers": headers} if isinstance(body, bytes) else {"json": body}
        answered, expected = ours.post("/sql", **sent), theirs.post("/sql", **sent)
        assert (answered.status_code, answered.json()) == (422, expected.json()), body
    answered = ours.post("/sql", content=b'{"sql": "SELECT 1", "properties": {"auto.offset.reset": "latest"}, "x": 2}',
                         headers={"content-type": "application/vnd.api+json; charset=utf-8"})
    assert answered.status_code == 200
    assert json.loads(answered.text.splitlines()[1]) == ["SELECT 1", {"auto.offset.reset": "latest"}]
    assert ours.post("/sql", json={"sql": "  "}).status_code == 400
