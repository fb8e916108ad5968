"""The SQL front end's parser: scripts cut into statements, Freshet's statements recognised, Spark SQL left as
written, and mistakes named by the script's line and column."""

import pytest

from freshet.sql import parser as p
from freshet.sql.catalog import definition
from freshet.sql.errors import SqlError

SCRIPT = """-- clicks, as the generator writes them
CREATE STREAM clicks (user_id STRING, `url` STRING, ts BIGINT, path AS lower(url))
  WITH (topic='clicks', format='json', timestamp='ts', watermark='30 seconds');
SELECT user_id, count(*) AS n /* a ; in a comment */ FROM clicks
  WHERE url <> ';' GROUP BY user_id EMIT CHANGES LIMIT 5;
CREATE TABLE users (id INT PRIMARY KEY, name STRING) WITH (topic='pg.public.users', format='debezium');
SELECT window(ts, '1 minute') AS w, count(*) FROM clicks GROUP BY 1 EMIT CHANGES UNTIL '5 minutes';
SELECT * FROM clicks EMIT CHANGES UNTIL 1000 ROWS;
SHOW STREAMS; show tables; LIST QUERIES; SHOW TOPICS EXTENDED;
DESCRIBE clicks; DESCRIBE FUNCTION upper;
EXPLAIN SELECT * FROM clicks EMIT CHANGES;
DROP STREAM IF EXISTS clicks DELETE TOPIC; DROP TABLE users;
TERMINATE CTAS_COUNTS_1;
SET 'auto.offset.reset' = 'earliest'; SET spark.sql.shuffle.partitions=2;
CREATE TABLE counts AS SELECT user_id, count(*) AS n FROM clicks GROUP BY user_id;
CREATE TABLE parquet_t (a INT) USING parquet;
CREATE OR REPLACE TEMPORARY VIEW v AS SELECT 1;
SELECT 'it''s; fine' AS s
"""


def test_a_script_is_cut_into_its_statements_with_where_each_starts():
    statements = p.parse(SCRIPT)
    kinds = [type(s).__name__ for s in statements]
    assert kinds == ["CreateSource", "PushQuery", "CreateSource", "PushQuery", "PushQuery", "Show", "Show", "Show",
                     "Show", "Describe", "SparkSql", "Explain", "Drop", "Drop", "Terminate", "SetOption", "SparkSql",
                     "CreateAsSelect", "SparkSql", "SparkSql", "SparkSql"]
    assert [(s.line, s.column) for s in statements[:4]] == [(2, 1), (4, 1), (6, 1), (7, 1)]
    assert statements[-1].text == "SELECT 'it''s; fine' AS s"


def test_create_stream_reads_columns_computed_columns_and_options():
    create = p.parse(SCRIPT)[0]
    assert (create.kind, create.name) == ("stream", "clicks")
    assert [(c.name, c.type, c.expr) for c in create.columns] == [
        ("user_id", "STRING", None), ("url", "STRING", None), ("ts", "BIGINT", None), ("path", None, "lower(url)")]
    assert create.options == {"topic": "clicks", "format": "json", "timestamp": "ts", "watermark": "30 seconds"}
    defn = definition(create)
    assert (defn.topic, defn.format, defn.timestamp, defn.watermark) == ("clicks", "json", "ts", "30 seconds")


def test_nested_types_keep_their_commas():
    create = p.parse_one("CREATE STREAM s (m MAP<STRING, INT>, a ARRAY<STRUCT<x: INT, y: STRING>>, d DECIMAL(10, 2)) "
                         "WITH (topic='t', format='json')")
    assert [(c.name, c.type) for c in create.columns] == [
        ("m", "MAP<STRING, INT>"), ("a", "ARRAY<STRUCT<x: INT, y: STRING>>"), ("d", "DECIMAL(10, 2)")]


def test_a_table_takes_its_key_from_primary_key_or_the_key_option():
    users = p.parse(SCRIPT)[2]
    assert definition(users).key == "id"
    keyed = p.parse_one("CREATE TABLE t (id STRING, v INT) WITH (topic='t', format='json', key='id')")
    assert definition(keyed).key == "id"


def test_push_query_stop_conditions():
    statements = p.parse(SCRIPT)
    limited, windowed, counted = statements[1], statements[3], statements[4]
    assert limited.limit == 5 and limited.select.endswith("GROUP BY user_id")
    assert windowed.until_seconds == 300 and windowed.limit is None
    assert counted.until_rows == 1000
    before = p.parse_one("SELECT * FROM s LIMIT 3 EMIT CHANGES")
    assert (before.select, before.limit) == ("SELECT * FROM s", 3)
    final = p.parse_one("SELECT * FROM s EMIT FINAL")
    assert final.final


def test_emit_changes_inside_parentheses_is_not_the_statements():
    # a subquery's word EMIT is not the statement's clause: Spark judges it
    assert isinstance(p.parse_one("SELECT * FROM (SELECT 1 AS emit) t"), p.SparkSql)


def test_other_statements():
    statements = p.parse(SCRIPT)
    assert [s.what for s in statements[5:9]] == ["streams", "tables", "queries", "topics"]
    assert statements[8].extended
    assert statements[9].name == "clicks"
    assert statements[11].select == "SELECT * FROM clicks"
    drop = statements[12]
    assert (drop.kind, drop.name, drop.if_exists, drop.delete_topic) == ("stream", "clicks", True, True)
    assert statements[14].query_id == "CTAS_COUNTS_1"
    assert (statements[15].key, statements[15].value) == ("auto.offset.reset", "earliest")
    ctas = statements[17]
    assert (ctas.kind, ctas.name) == ("table", "counts")
    assert ctas.select == "SELECT user_id, count(*) AS n FROM clicks GROUP BY user_id"
    assert SCRIPT[ctas.select_start:].startswith("SELECT user_id")


@pytest.mark.parametrize("script, line, column, says", [
    ("SELECT 1;\nCREATE STREAM s (a INT) WITH (topic='t' format='json')", 2, 41, "expected ',' between options"),
    ("CREATE STREAM s (a INT) WITH (topic 't')", 1, 31, "expected name = 'value'"),
    ("CREATE STREAM s (a INT) WITH (topic='t', format='json'", 1, 30, "never closed"),
    ("SELECT 1;\n\n  SELECT 'open", 3, 10, "unterminated '"),
    ("SELECT * FROM s\nEMIT CHANGES LIMIT ten", 2, 20, "expected a number of rows after LIMIT"),
    ("SELECT * FROM s EMIT CHANGES UNTIL 'soon'", 1, 36, "expected a duration"),
    ("SELECT * FROM s EMIT CHANGES LIMIT 0", 1, 36, "at least 1"),
    ("SELECT * FROM s EMIT CHANGES ORDER BY x", 1, 30, "expected UNTIL or LIMIT"),
    ("CREATE STREAM s (a) WITH (topic='t', format='json')", 1, 18, "column a needs a type"),
    ("CREATE STREAM s WITH (topic='t', format='json')", 1, 1, "needs its columns"),
    ("CREATE STREAM s (a INT)", 1, 1, "needs WITH"),
    ("DROP STREAM s CASCADE", 1, 15, "unexpected text"),
    ("TERMINATE", 1, 10, "expected a query id"),
    ("SET 'auto.offset.reset' 'earliest'", 1, 25, "expected ="),
])
def test_syntax_errors_name_line_and_column(script, line, column, says):
    with pytest.raises(SqlError) as caught:
        p.parse(script)
    assert (caught.value.line, caught.value.column) == (line, column), str(caught.value)
    assert says in caught.value.message
    assert str(caught.value).startswith(f"line {line}, column {column}: ")


@pytest.mark.parametrize("create, says", [
    ("CREATE STREAM s (a INT) WITH (topic='t', format='xml')", "format 'xml'"),
    ("CREATE STREAM s (a INT) WITH (format='json')", "needs WITH (topic='...')"),
    ("CREATE STREAM s (a INT) WITH (topic='t', format='json', colour='red')", "unknown option 'colour'"),
    ("CREATE STREAM s (a INT) WITH (topic='t', format='debezium')", "makes a TABLE"),
    ("CREATE TABLE t (a INT) WITH (topic='t', format='json')", "latest row per key"),
    ("CREATE STREAM s (a INT) WITH (topic='t', format='json', timestamp='b')", "timestamp='b' is not a column"),
    ("CREATE STREAM s (a INT) WITH (topic='t', format='json', watermark='soon')", "watermark must be a duration"),
    ("CREATE STREAM s (a INT, b INT) WITH (topic='t', format='raw')", "format 'raw'"),
    ("CREATE STREAM s (a INT) WITH (topic='t', format='avro')", "needs its schema"),
    ("CREATE STREAM s (a INT, A STRING) WITH (topic='t', format='json')", "declared twice"),
])
def test_definitions_that_cannot_work_are_refused(create, says):
    with pytest.raises(SqlError) as caught:
        definition(p.parse_one(create))
    assert says in str(caught.value)


def test_durations():
    assert p.duration_seconds("5 minutes") == 300
    assert p.duration_seconds("1 hour 30 minutes") == 5400
    assert p.duration_seconds("500 ms") == 0.5
    assert p.duration_seconds("2 DAYS") == 172800
    assert p.duration_seconds("soon") is None
    assert p.duration_seconds("") is None
