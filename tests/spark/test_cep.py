"""CEP and stored queries on Spark: the rules over a static DataFrame give the planted attacks; on a stream,
rules added and removed while the query runs take effect without a restart; stored queries match as a
brute-force scan does."""

from __future__ import annotations

import json
import time

import pytest
from pyspark.sql import functions as F

from freshet.cep.rulesets import split_rules, text
from freshet.cep.search import Document, matches, parse_query
from freshet.client.produce import produce_records
from freshet.client.stored import StoredDefinitions
from freshet.gen.listings import listings
from freshet.gen.security_events import security_events
from freshet.pipelines.cep import REFRESH_S, FixedRules, TopicRules, match_queries, match_rules
from freshet.testing.polling import wait_for
from freshet.testing.topics import create_topic

INTRUSION = {t.split()[1]: t for t in split_rules(text("intrusion"))}


def raw_frame(spark, events, topic="events"):
    rows = [(json.dumps(e).encode(), topic, 0, i) for i, e in enumerate(events)]
    return spark.createDataFrame(rows, "value binary, topic string, partition int, offset long")


def test_intrusion_rules_on_a_static_frame_alert_on_the_planted_attacks(spark):
    generated = security_events(3_000, attacks=2, seed=21, rate_per_s=10)
    alerts = match_rules(raw_frame(spark, generated.events), FixedRules(INTRUSION)).collect()
    assert sorted((a.rule, _host(a)) for a in alerts) == sorted((p.rule, p.host) for p in generated.planted)
    brute = [a for a in alerts if a.rule == "brute_force"]
    planted = {p.host: p for p in generated.planted}
    assert all(a.measures.toPython()["attempts"] == planted[_host(a)].events for a in brute)


def _host(alert) -> str:
    """An intrusion alert's host: its key's one field (a JSON object, VARIANT in Spark)."""
    return next(iter(alert.key.toPython().values()))


def test_events_that_spell_a_value_with_escapes_are_still_routed(spark):
    plain = json.dumps(_p2p("12.0.0.1", 1_000)).encode()
    escaped = json.dumps(_p2p("12.0.0.2", 2_000)).replace('"p2p"', '"\\u0070\\u0032\\u0070"').encode()
    assert b"p2p" not in escaped
    rows = [(plain, "events", 0, 0), (escaped, "events", 0, 1), (b"not json", "events", 0, 2)]
    raw = spark.createDataFrame(rows, "value binary, topic string, partition int, offset long")
    alerts = match_rules(raw, FixedRules({"p2p": INTRUSION["p2p"]})).collect()
    assert sorted(_host(a) for a in alerts) == ["12.0.0.1", "12.0.0.2"]


def test_the_topic_records_are_the_alert_records_rules_try_prints(spark, tmp_path):
    """The fraud rules over the same payments and logins: each record `freshet run cep` would write to its topic
    (the row as the topic sink serializes it: ``to_json`` of the whole row) equals `freshet rules try`'s line."""
    from click.testing import CliRunner

    from freshet.cli.cep_cmd import rules

    t0 = 1_767_225_600_000
    events = ([{"card": "c1", "country": "NL", "amount": 12.5, "event_time": "2026-01-01T00:00:00.250Z"},
               {"card": "c1", "country": "NL", "amount": 3, "event_time": t0 + 60_000},
               {"card": "c1", "country": "CH", "amount": 99.99, "event_time": t0 + 120_007},
               {"card": "c2", "country": "NL", "amount": 1, "event_time": t0}]
              + [{"user": "ann", "kind": "login_failed", "event_time": t0 + i * 1000} for i in range(4)]
              + [{"user": "ann", "kind": "login_ok", "event_time": t0 + 5000},
                 {"user": "ann", "kind": "password_change", "event_time": "2026-01-01T00:00:06Z"}])
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    tried = CliRunner().invoke(rules, ["try", _fraud_file(), str(tmp_path / "events.jsonl")])
    assert tried.exit_code == 0, tried.output
    printed = sorted((json.loads(line) for line in tried.stdout.splitlines()), key=lambda a: a["rule"])
    fraud = {t.split()[1]: t for t in split_rules(text("fraud"))}
    alerts = match_rules(raw_frame(spark, events), FixedRules(fraud))
    written = sorted((json.loads(r.value) for r in alerts.select(F.to_json(F.struct("*")).alias("value")).collect()),
                     key=lambda a: a["rule"])
    assert [a["rule"] for a in printed] == ["account_takeover", "card_in_two_countries"]
    assert written == printed
    assert printed[1]["key"] == {"card": "c1"} and printed[1]["match_end"] == "2026-01-01T00:02:00.007Z"


def _fraud_file() -> str:
    from importlib import resources

    return str(resources.files("freshet.cep.rulesets").joinpath("fraud.rules"))


def test_stored_queries_on_a_static_frame_match_as_a_scan_does(spark):
    events = list(listings(400, seed=2))
    queries = {"delft-cheap": "city = Delft AND price < 400000", "canal": '"canal view" AND NOT leasehold',
               "big": "bedrooms >= 5 OR area_m2 > 180", "none": "city = Atlantis"}
    got = sorted((q, r.offset) for r in match_queries(raw_frame(spark, events), FixedRules(queries)).collect()
                 for q in r.query_ids)
    expected = sorted((q, i) for q, t in queries.items() for i, e in enumerate(events)
                      if matches(parse_query(t), Document(e)))
    assert got == expected and len(expected) > 20


def _attack(dst: str, at_ms: int, n: int = 22) -> list[dict]:
    return [{"event_time": at_ms + i * 1000, "src_ip": f"11.0.0.{i}", "dst_ip": dst, "group": "generalbruteforce",
             "event_name": "ssh failed password"} for i in range(n)]


def _clock(at_ms: int) -> dict:  # an unrelated event that moves event time (and so the watermark) on
    return {"event_time": at_ms, "src_ip": "11.9.9.9", "dst_ip": "10.0.0.1", "group": "web", "event_name": "GET /"}


def _p2p(src: str, at_ms: int) -> dict:
    return {"event_time": at_ms, "src_ip": src, "dst_ip": "10.0.0.2", "group": "p2p", "event_name": "bittorrent"}


@pytest.mark.timeout(600)
def test_rules_added_and_removed_while_the_query_runs(spark, broker, topic_name, tmp_path):
    events_topic, rules_topic = topic_name, f"{topic_name}-rules"
    create_topic(broker.bootstrap, events_topic, 2)
    stored = StoredDefinitions(broker.bootstrap, rules_topic)
    stored.put("p2p", INTRUSION["p2p"])
    raw = (spark.readStream.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
           .option("subscribe", events_topic).option("startingOffsets", "earliest").load())
    alerts = match_rules(raw, TopicRules(broker.bootstrap, rules_topic), lateness="10 seconds")
    name = f"cep_{abs(hash(topic_name)) % 10**8}"
    query = (alerts.writeStream.format("memory").queryName(name).outputMode("append")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="1 second").start())

    def produce(events):
        produce_records(broker.bootstrap, events_topic,
                        ((e["src_ip"].encode(), json.dumps(e).encode(), None) for e in events))

    def seen() -> list[tuple]:
        return sorted((r.rule, _host(r)) for r in spark.sql(f"select rule, key from {name}").collect())

    try:
        t0 = 1_800_000_000_000
        # 1. only p2p is stored: a brute-force attack goes unnoticed, the p2p event does not
        produce(_attack("10.1.1.1", t0) + [_p2p("12.0.0.1", t0 + 5_000), _clock(t0 + 300_000)])
        wait_for(lambda: ("p2p", "12.0.0.1") in seen(), 180, "the p2p alert", 1.0)
        # 2. brute_force added while the query runs: the next attack is caught
        stored.put("brute_force", INTRUSION["brute_force"])
        # what the pipeline promises: a change is in the rules of every batch that starts REFRESH_S after it was
        # stored (a worker's last read of the rules topic began before the change, or it reads again first). The
        # workers' reads are not observable from here (they read only when a batch runs): waiting out the bound is
        # the condition, and events produced after it meet the rule
        time.sleep(REFRESH_S)
        produce(_attack("10.2.2.2", t0 + 400_000) + [_clock(t0 + 700_000)])
        wait_for(lambda: ("brute_force", "10.2.2.2") in seen(), 180, "the brute-force alert after the rule was added", 1.0)
        # 3. p2p removed: a p2p event goes unnoticed, while a later attack still alerts
        stored.remove("p2p")
        time.sleep(REFRESH_S)  # as above
        produce([_p2p("12.0.0.2", t0 + 800_000)] + _attack("10.3.3.3", t0 + 810_000) + [_clock(t0 + 1_200_000)])
        wait_for(lambda: ("brute_force", "10.3.3.3") in seen(), 180, "the brute-force alert after p2p was removed", 1.0)
        assert seen() == [("brute_force", "10.2.2.2"), ("brute_force", "10.3.3.3"), ("p2p", "12.0.0.1")]
    finally:
        query.stop()
        stored.close()


def test_a_rules_refresh_counts_from_when_it_asked_for_the_end(broker, topic_name, monkeypatch):
    """A running pipeline reads the rules again once its last read is REFRESH_S old (TopicRules), counted from
    when that read began: a change written while a slow read ran is then read at the next batch, not REFRESH_S
    after the slow read ended (what lets a writer know that every batch REFRESH_S after its change has it)."""
    from freshet.client import stored as stored_module

    writer, reader = StoredDefinitions(broker.bootstrap, topic_name), StoredDefinitions(broker.bootstrap, topic_name)
    writer.put("a", "rule a")
    read = stored_module.read_to_end

    entered = []

    def slow_read(*args, **kwargs):  # a read on a busy machine: the end asked for, then a while until it returns
        entered.append(time.monotonic())
        ends = read(*args, **kwargs)
        time.sleep(0.5)
        return ends

    monkeypatch.setattr(stored_module, "read_to_end", slow_read)
    try:
        began = time.monotonic()
        assert set(reader.refresh()) == {"a"}
        assert began <= reader.refreshed_at <= entered[0]  # before the read asked for the end: no time margin
    finally:
        writer.close()
        reader.close()
