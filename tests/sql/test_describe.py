"""DESCRIBE of a table a persistent query writes: its columns, topic, the query writing it and its rates (from the
runner's reporter, as the dashboard sees them); DROP refused while the query writes it."""

import re

import pytest

from freshet.sql.errors import SqlError
from freshet.testing.polling import wait_for

from .helpers import access_lines, access_stream, produce


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FRESHET_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_describe_names_the_query_writing_a_table_and_its_rates(sql, broker, topic_name, spark, data_dir):
    produce(broker.bootstrap, topic_name, access_lines(300))
    suffix = abs(hash(topic_name)) % 10**8
    stream, table = f"d_access_{suffix}", f"d_counts_{suffix}"
    list(sql.execute(access_stream(stream, topic_name)))
    (created,) = sql.execute(f"CREATE TABLE {table} AS SELECT client_ip, count(*) AS requests FROM {stream} "
                             f"WHERE client_ip <> '' GROUP BY client_ip")
    query_id = re.search(r"ID (\S+):", created.text).group(1)
    try:
        def described() -> dict:
            (result,) = sql.execute(f"DESCRIBE {table}")
            return {row[0]: row[1:] for row in result.rows}

        wait_for(lambda: "processed rows/s" in described(), 300, "the query's first progress report")
        rows = described()
        assert rows["written by"] == (query_id, "RUNNING")
        assert rows["client_ip"][0] == "string" and rows["requests"][0] == "bigint"
        assert float(rows["input rows/s"][0]) >= 0 and rows["late rows dropped"] == ("0", "")
        with pytest.raises(SqlError, match=f"written by query {query_id}: TERMINATE it first"):
            list(sql.execute(f"DROP TABLE {table}"))
    finally:
        list(sql.execute(f"TERMINATE {query_id}"))
    assert not spark.streams.active


def test_describe_extended_counts_the_topics_records_and_bytes(sql, broker, topic_name):
    """DESCRIBE EXTENDED: the topic's records (high watermark - log start, over its partitions) and its bytes on the
    leaders' disks (the row said "records" and gave the bytes)."""
    produce(broker.bootstrap, topic_name, access_lines(120))
    stream = f"x_access_{abs(hash(topic_name)) % 10**8}"
    list(sql.execute(access_stream(stream, topic_name)))
    (result,) = sql.execute(f"DESCRIBE EXTENDED {stream}")
    rows = {row[0]: row[1:] for row in result.rows}
    assert rows["records"] == ("120", "2 partitions")
    assert int(rows["bytes"][0]) > sum(len(line) for line in access_lines(120))
    (plain,) = sql.execute(f"DESCRIBE {stream}")
    assert "records" not in {row[0] for row in plain.rows}
