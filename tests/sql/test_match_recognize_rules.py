"""The intrusion rules' other two, http_scan and p2p, written as MATCH_RECOGNIZE: the shipped rules' grammar, and
on the same generated events the matches of the engine `freshet rules` runs, over a JSON stream and over the
same events as CSV (the engine reads a CSV row as the JSON object of its columns)."""

from datetime import datetime, timedelta

import pytest

from freshet.cep.matcher import match_events
from freshet.cep.rules import parse_rule
from freshet.cep.rulesets import split_rules, text
from freshet.gen.security_events import iso, security_events
from freshet.sql.match_recognize import rule_text, split

from .helpers import produce

INTRUSION = {t.split()[1]: t for t in split_rules(text("intrusion"))}

QUERIES = {
    "http_scan": """
        SELECT * FROM (SELECT * FROM {stream} WHERE `group` = 'httpscan')
        MATCH_RECOGNIZE (
            PARTITION BY src_ip
            ORDER BY event_time
            MEASURES FIRST(src_ip) AS src_ip, COUNT(DISTINCT event_name) AS names, COUNT(*) AS probes,
                     FIRST(event_time) AS first_seen, LAST(event_time) AS last_seen
            ONE ROW PER MATCH
            AFTER MATCH SKIP PAST LAST ROW
            PATTERN (S*? T) WITHIN INTERVAL '3' MINUTE
            DEFINE T AS COUNT(DISTINCT event_name) > 5
        ) AS m""",
    "p2p": """
        SELECT * FROM (SELECT * FROM {stream} WHERE `group` = 'p2p')
        MATCH_RECOGNIZE (
            PARTITION BY src_ip
            ORDER BY event_time
            MEASURES P.src_ip AS src_ip, P.dst_ip AS dst_ip, P.event_name AS event_name, P.event_time AS seen_at
            ONE ROW PER MATCH
            PATTERN (P)
        ) AS m""",
}
COLUMNS = "event_time TIMESTAMP, src_ip STRING, dst_ip STRING, dst_port INT, `group` STRING, event_name STRING"


@pytest.mark.parametrize("rule", sorted(QUERIES))
def test_the_clause_is_the_shipped_rule(rule):
    sql_rule = parse_rule(rule_text(split(QUERIES[rule].format(stream="events")), rule))
    shipped = parse_rule(INTRUSION[rule])
    for part in ("pattern", "where", "partition_by", "order_by", "defines", "measures", "within_ms", "skip"):
        assert getattr(sql_rule, part) == getattr(shipped, part), part


def test_http_scan_and_p2p_give_the_engine_s_matches_over_json_and_csv(sql, broker, topic_name):
    generated = security_events(3_000, attacks=6, seed=21, rate_per_s=10)  # two of each attack
    events = list(generated.events)
    # an event no rule wants, an hour on: the watermark passes every match, so each is written
    last = max(datetime.fromisoformat(e["event_time"]) for e in events)
    events.append({"event_time": iso(int((last + timedelta(hours=1)).timestamp() * 1000)), "src_ip": "1.1.1.1",
                   "dst_ip": "2.2.2.2", "dst_port": 1, "group": "none", "event_name": "end"})
    fields = ("event_time", "src_ip", "dst_ip", "dst_port", "group", "event_name")
    assert not any("," in str(e[f]) for e in events for f in fields)
    produce(broker.bootstrap, topic_name, events, partitions=1)
    produce(broker.bootstrap, topic_name + "-csv", [",".join(str(e[f]) for f in fields) for e in events],
            partitions=1)
    n = abs(hash(topic_name)) % 10**8
    list(sql.execute(f"""
        CREATE STREAM sec_{n} ({COLUMNS}) WITH (topic='{topic_name}', format='json', timestamp='event_time',
            watermark='30 seconds');
        CREATE STREAM sec_csv_{n} ({COLUMNS}) WITH (topic='{topic_name}-csv', format='csv', timestamp='event_time',
            watermark='30 seconds')"""))
    expected = {rule: sorted(tuple(m.alert()["measures"].values())[:3]
                             for m in match_events(parse_rule(INTRUSION[rule]), events)) for rule in QUERIES}
    assert all(len(expected[r]) >= 2 for r in QUERIES)  # the planted attacks at least
    runs = [("http_scan", f"sec_{n}"), ("p2p", f"sec_{n}"), ("p2p", f"sec_csv_{n}"), ("http_scan", f"sec_csv_{n}")]
    # started together, read one after the other: the four queries' microbatches share Spark's time
    pushes = [sql.execute_one(QUERIES[rule].format(stream=stream) + f" EMIT CHANGES LIMIT {len(expected[rule])}")
              for rule, stream in runs]
    try:
        for (rule, stream), push in zip(runs, pushes):
            assert push.columns[:3] == list(parse_rule(INTRUSION[rule]).measures[i][0] for i in range(3))
            assert sorted(tuple(row[:3]) for row in push.rows) == expected[rule], (rule, stream)
    finally:
        for push in pushes:
            push.stop()


AVRO_SCHEMA = {"type": "record", "name": "SecurityEvent", "fields": [
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "src_ip", "type": "string"}, {"name": "dst_ip", "type": "string"},
    {"name": "dst_port", "type": ["null", "int"]}, {"name": "group", "type": "string"},
    {"name": "event_name", "type": "string"}]}


def test_match_recognize_over_an_avro_stream_gives_the_engine_s_matches(sql, broker, topic_name):
    """The engine reads an Avro record as the JSON object of the stream's columns (from the schema's fields, the
    timestamp-millis event time as a TIMESTAMP), Confluent-framed here as Schema Registry's serializers write."""
    import io
    import json

    import fastavro

    generated = security_events(2_000, attacks=6, seed=22, rate_per_s=10)
    events = list(generated.events)
    last = max(datetime.fromisoformat(e["event_time"]) for e in events)
    events.append({"event_time": iso(int((last + timedelta(hours=1)).timestamp() * 1000)), "src_ip": "1.1.1.1",
                   "dst_ip": "2.2.2.2", "dst_port": 1, "group": "none", "event_name": "end"})
    parsed = fastavro.parse_schema(AVRO_SCHEMA)

    def avro(event: dict) -> bytes:
        out = io.BytesIO()
        record = dict(event, event_time=int(datetime.fromisoformat(event["event_time"]).timestamp() * 1000))
        fastavro.schemaless_writer(out, parsed, {f["name"]: record.get(f["name"]) for f in AVRO_SCHEMA["fields"]})
        return b"\x00\x00\x00\x00\x01" + out.getvalue()

    produce(broker.bootstrap, topic_name, [avro(e) for e in events], partitions=1)
    stream = f"sec_avro_{abs(hash(topic_name)) % 10**8}"
    list(sql.execute(f"""CREATE STREAM {stream} WITH (topic='{topic_name}', format='avro', framing='confluent',
        schema='{json.dumps(AVRO_SCHEMA)}', timestamp='event_time', watermark='30 seconds')"""))
    expected = sorted(tuple(m.alert()["measures"].values())[:3]
                      for m in match_events(parse_rule(INTRUSION["p2p"]), events))
    assert len(expected) >= 2
    push = sql.execute_one(QUERIES["p2p"].format(stream=stream) + f" EMIT CHANGES LIMIT {len(expected)}")
    try:
        assert push.columns == ["src_ip", "dst_ip", "event_name", "seen_at", "match_start", "match_end"]
        rows = list(push.rows)
        assert sorted(tuple(row[:3]) for row in rows) == expected
        assert all(isinstance(row[3], datetime) for row in rows)  # the Avro timestamp-millis, a TIMESTAMP again
    finally:
        push.stop()
