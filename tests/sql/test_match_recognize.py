"""MATCH_RECOGNIZE in SQL runs on the engine of `freshet rules`: the intrusion rule written as a SQL query gives the
matches the shipped rule gives on the same generated events; a clause that cannot run is one line."""

import json
from datetime import datetime, timedelta

import pytest

from freshet.cep.matcher import match_events
from freshet.cep.rules import parse_rule
from freshet.cep.rulesets import split_rules, text
from freshet.gen.security_events import iso, security_events
from freshet.sql.errors import SqlError
from freshet.sql.match_recognize import _measures_of, rule_text, split
from freshet.testing.crash import read_everything
from freshet.testing.polling import wait_for

from .helpers import produce

INTRUSION = {t.split()[1]: t for t in split_rules(text("intrusion"))}

BRUTE_FORCE = """
    SELECT * FROM (SELECT * FROM {stream} WHERE `group` = 'generalbruteforce')
    MATCH_RECOGNIZE (
        PARTITION BY dst_ip
        ORDER BY event_time
        MEASURES FIRST(A.dst_ip) AS dst_ip, COUNT(*) AS attempts, COUNT(DISTINCT A.src_ip) AS sources,
                 FIRST(A.event_time) AS first_seen, LAST(A.event_time) AS last_seen
        ONE ROW PER MATCH
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A{{20,}}) WITHIN INTERVAL '2' MINUTE
    ) AS m"""


def test_the_clause_is_the_shipped_rule_s_grammar():
    rec = split(BRUTE_FORCE.format(stream="events"))
    assert (rec.stream, rec.where, rec.alias) == ("events", "`group` = 'generalbruteforce'", "m")
    sql_rule, shipped = parse_rule(rule_text(rec, "brute_force")), parse_rule(INTRUSION["brute_force"])
    for part in ("pattern", "where", "partition_by", "order_by", "measures", "within_ms", "skip"):
        assert getattr(sql_rule, part) == getattr(shipped, part), part
    assert list(_measures_of(rec.body)) == ["dst_ip", "attempts", "sources", "first_seen", "last_seen"]
    ascending = split(BRUTE_FORCE.format(stream="events").replace("ORDER BY event_time", "ORDER BY event_time ASC"))
    assert parse_rule(rule_text(ascending, "brute_force")).order_by == shipped.order_by


@pytest.mark.parametrize("query, says", [
    ("SELECT * FROM events MATCH_RECOGNIZE PARTITION BY a", "in parentheses"),
    ("SELECT * FROM (SELECT a FROM events) MATCH_RECOGNIZE (PATTERN (A))", "MATCH_RECOGNIZE follows a stream"),
    ("SELECT * FROM events MATCH_RECOGNIZE (PATTERN (A) MATCH_RECOGNIZE (PATTERN (B))", "one MATCH_RECOGNIZE"),
    ("SELECT * FROM events MATCH_RECOGNIZE (PATTERN (A)", "not closed"),
    ("SELECT * FROM events MATCH_RECOGNIZE (ORDER BY ts DESC PATTERN (A))", "ascending"),
])
def test_a_clause_out_of_place_is_one_line(query, says):
    with pytest.raises(SqlError, match=says) as caught:
        rule_text(split(query), "r")
    assert "\n" not in str(caught.value)


def test_intrusion_rule_as_match_recognize_gives_the_shipped_rule_s_matches(sql, broker, topic_name, spark,
                                                                          tmp_path, monkeypatch):
    generated = security_events(3_000, attacks=2, seed=21, rate_per_s=10)
    events = list(generated.events)
    # an event no rule wants, an hour on: the watermark passes every match, so each is written
    last = max(datetime.fromisoformat(e["event_time"]) for e in events)
    events.append({"event_time": iso(int((last + timedelta(hours=1)).timestamp() * 1000)), "src_ip": "1.1.1.1",
                   "dst_ip": "2.2.2.2", "dst_port": 1, "group": "none", "event_name": "end"})
    produce(broker.bootstrap, topic_name, events, partitions=1)
    expected = sorted(tuple(m.alert()["measures"].values())[:3]
                      for m in match_events(parse_rule(INTRUSION["brute_force"]), events))
    assert len(expected) == 2
    stream = f"security_{id(sql)}"
    list(sql.execute(f"""CREATE STREAM {stream} (event_time TIMESTAMP, src_ip STRING, dst_ip STRING, dst_port INT,
        `group` STRING, event_name STRING) WITH (topic='{topic_name}', format='json', timestamp='event_time',
        watermark='30 seconds')"""))

    with pytest.raises(SqlError, match="no_such_stream: no such stream"):
        list(sql.execute(BRUTE_FORCE.format(stream="no_such_stream") + " EMIT CHANGES LIMIT 1"))
    with pytest.raises(SqlError, match=f"{stream} has no column dst_host"):
        list(sql.execute(BRUTE_FORCE.format(stream=stream).replace("PARTITION BY dst_ip", "PARTITION BY dst_host")
                         + " EMIT CHANGES LIMIT 1"))
    assert not spark.streams.active  # nothing started

    (push,) = sql.execute(BRUTE_FORCE.format(stream=stream) + f" EMIT CHANGES LIMIT {len(expected)}")
    assert push.columns == ["dst_ip", "attempts", "sources", "first_seen", "last_seen", "match_start",
                            "match_end"]
    assert sorted(tuple(row[:3]) for row in push.rows) == expected

    # the same clause as a persistent query: its stream's topic gets each match once
    monkeypatch.setenv("FRESHET_DATA_DIR", str(tmp_path))
    alerts = f"alerts_{id(sql)}"
    (created,) = sql.execute(f"CREATE STREAM {alerts} AS " + BRUTE_FORCE.format(stream=stream))
    query_id = created.text.split()[4].rstrip(":")
    try:
        def written():
            return [json.loads(v) for v in read_everything(broker.bootstrap, alerts, 1, timeout_s=30)[0]]

        # each look starts a consumer: once a second (the query's trigger) is often enough
        wait_for(lambda: len(written()) >= len(expected), timeout=300, what="the alerts in the stream's topic",
                 interval=1.0)
        assert sorted((a["dst_ip"], a["attempts"], a["sources"]) for a in written()) == expected
    finally:
        list(sql.execute(f"TERMINATE {query_id}"))
