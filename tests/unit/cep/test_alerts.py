"""One alert record for a match, wherever it goes: `freshet rules try` prints what the Spark pipeline's
step builds for its topic, field by field; and what each does with an attempt still pending when the input
ends (NOT FOLLOWED BY, WITHIN)."""

from __future__ import annotations

import json

import orjson
import pandas as pd
from click.testing import CliRunner

from freshet.cep.matcher import CompiledRule, Match, iso_utc
from freshet.cep.rules import parse_rule
from freshet.cli.cep_cmd import rules
from freshet.pipelines.cep import COMPACT_PACKS, FixedRules, Group, _match_step, dump_group, load_group, pack, unpack
from freshet.pipelines.stateful import _FreshState

MINUTE = 60_000

TAKEOVER = """RULE takeover
PARTITION BY user, device.os
MEASURES FIRST(F.ip) AS first_ip, COUNT(F.*) AS failures, AVG(F.score) AS score, S.note AS note,
         C.city AS city
PATTERN (F{2,} S C)
DEFINE F AS kind = 'failed', S AS kind = 'ok', C AS kind = 'changed'
WITHIN 30 MINUTES
"""

UNPAID = """RULE unpaid
PARTITION BY order_id
MEASURES A.order_id AS order_id
PATTERN (A) NOT FOLLOWED BY P
DEFINE A AS kind = 'placed', P AS kind = 'paid'
WITHIN 30 MINUTES
"""

BURST = """RULE burst
PARTITION BY host
MEASURES COUNT(*) AS attempts
PATTERN (A{3,})
WITHIN 2 MINUTES
"""

REPLIED = """RULE unanswered
PARTITION BY host
PATTERN (Q R)
DEFINE Q AS kind = 'question', R AS kind = 'reply'
WITHIN 10 SECONDS
EMIT TIMEOUTS
"""


def rules_try(tmp_path, rule_text: str, events: list[dict]) -> list[dict]:
    """The alert records `freshet rules try` prints (one JSON object a line)."""
    (tmp_path / "r.rules").write_text(rule_text)
    (tmp_path / "e.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    run = CliRunner().invoke(rules, ["try", str(tmp_path / "r.rules"), str(tmp_path / "e.jsonl")])
    assert run.exit_code == 0, run.output
    return [json.loads(line) for line in run.stdout.splitlines()]


def routed(rule_text: str, events: list[dict], per_pack: int = 3) -> pd.DataFrame:
    """The pack rows `route` hands the stateful step for one rule (its columns, one partition's offsets),
    ``per_pack`` events a pack."""
    compiled = CompiledRule(parse_rule(rule_text))
    chosen = [(orjson.dumps(compiled.key_of(e)).decode(), compiled.time_of(e), offset, orjson.dumps(e).decode())
              for offset, e in enumerate(events) if compiled.accepts(e)]
    packs = [pack(chosen[i:i + per_pack]) for i in range(0, len(chosen), per_pack)]
    columns = list(zip(*packs)) or [()] * 5
    return pd.DataFrame({
        # naive, in the session's time zone (UTC), as Spark hands timestamps to a pandas function
        "event_time": pd.to_datetime(pd.Series(columns[0], dtype="int64"), unit="ms"),
        "pkeys": list(columns[1]), "times": list(columns[2]), "ords": list(columns[3]), "events": list(columns[4])})


def topic_records(frames) -> list[dict]:
    """The step's output rows as the topic sink writes them (``to_json`` of the row after ``alert_columns``:
    key and measures parsed from their JSON, timestamps as Spark's UTC ISO text, checked in
    tests/spark/test_cep.py)."""
    out = []
    for frame in frames:
        for row in frame.to_dict("records"):
            out.append({**row, "key": json.loads(row["key"]), "measures": json.loads(row["measures"]),
                        "match_start": row["match_start"].strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                        "match_end": row["match_end"].strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"})
    return out


def spark_static(rule_text: str, events: list[dict]) -> list[dict]:
    name = parse_rule(rule_text).name
    step = _match_step(FixedRules({name: rule_text}))
    return topic_records(step((name, 0), iter([routed(rule_text, events)]), _FreshState()))


class StreamState:
    """Spark's GroupState as ``applyInPandasWithState`` hands it to the step, with an event-time timeout:
    the watermark is set by the test, the timeout kept so the test can call the step when Spark would."""

    def __init__(self) -> None:
        self.exists, self.get, self.hasTimedOut = False, None, False
        self.watermark = 0
        self.timeout: int | None = None

    def update(self, value) -> None:
        self.get, self.exists = value, True

    def remove(self) -> None:
        self.get, self.exists, self.timeout = None, False, None

    def getCurrentWatermarkMs(self) -> int:
        return self.watermark

    def setTimeoutTimestamp(self, ms: int) -> None:
        self.timeout = ms


def test_rules_try_prints_the_records_the_spark_step_writes(tmp_path):
    t0 = 1_767_225_600_000
    events = [
        {"user": "ann", "device": {"os": "ios"}, "kind": "failed", "ip": "10.0.0.1", "score": 1, "event_time": t0},
        {"user": "ann", "device": {"os": "ios"}, "kind": "failed", "ip": "10.0.0.2", "score": 2,
         "event_time": "2026-01-01T00:00:01.5Z"},
        {"user": "ann", "device": {"os": "ios"}, "kind": "ok", "note": None, "event_time": t0 + 2_000},
        {"user": "ann", "device": {"os": "ios"}, "kind": "changed", "city": "Zürich", "event_time": t0 + 3_007},
        {"user": "bob", "device": {"os": "linux"}, "kind": "failed", "ip": "10.0.0.9", "score": 5,
         "event_time": t0 + 10},
        {"user": "bob", "device": {"os": "linux"}, "kind": "failed", "ip": "10.0.0.9", "score": 5,
         "event_time": t0 + 20},
        {"user": "bob", "device": {"os": "linux"}, "kind": "ok", "note": "2fa", "event_time": t0 + 30},
        {"user": "bob", "device": {"os": "linux"}, "kind": "changed", "city": "Delft", "event_time": t0 + 40},
    ]
    tried = rules_try(tmp_path, TAKEOVER, events)
    streamed = spark_static(TAKEOVER, events)
    assert len(tried) == len(streamed) == 2
    for mine, theirs in zip(sorted(tried, key=lambda a: a["key"]["user"]),
                            sorted(streamed, key=lambda a: a["key"]["user"])):
        assert list(mine) == ["rule", "kind", "key", "match_start", "match_end", "rows", "measures"]
        for field in mine:
            assert mine[field] == theirs[field], field
    ann = min(tried, key=lambda a: a["key"]["user"])
    assert ann == {"rule": "takeover", "kind": "match", "key": {"user": "ann", "device.os": "ios"},
                   "match_start": "2026-01-01T00:00:00.000Z", "match_end": "2026-01-01T00:00:03.007Z", "rows": 4,
                   "measures": {"first_ip": "10.0.0.1", "failures": 2, "score": 1.5, "note": None,
                                "city": "Zürich"}}


def test_a_measure_json_cannot_hold_is_null_in_both():
    match = Match("r", (), 0, 0, 1, {"huge": float("inf"), "nan": float("nan"), "n": 1.5})
    assert match.alert()["measures"] == {"huge": None, "nan": None, "n": 1.5} and match.alert()["key"] == {}
    assert json.loads(json.dumps(match.alert(), allow_nan=False)) == match.alert()
    assert iso_utc(-1) == "1969-12-31T23:59:59.999Z"


def _stream(rule_text: str, events: list[dict], lateness_ms: int):
    """The Spark step on a stream: one microbatch of ``events`` (the watermark still behind them all), and one
    with no events and the watermark ``lateness_ms`` behind the newest; then no more events, but the watermark
    moved on (as later events would move it) to each event-time timeout the step asks for, and the step called
    there as Spark calls it. Returns (the first batches' records, the watermark at which records came, those
    records)."""
    name = parse_rule(rule_text).name
    step = _match_step(FixedRules({name: rule_text}))
    state = StreamState()
    compiled = CompiledRule(parse_rule(rule_text))
    state.watermark = min(compiled.time_of(e) for e in events) - 1
    first = topic_records(step((name, 0), iter([routed(rule_text, events)]), state))
    state.watermark = max(compiled.time_of(e) for e in events) - lateness_ms
    first += topic_records(step((name, 0), iter([]), state))
    for _ in range(len(events) + 2):
        assert state.exists and state.timeout is not None, "the attempt is kept in the state, with a timeout"
        state.watermark = state.timeout + 1  # Spark times a group out once the watermark passes its timestamp
        state.hasTimedOut = True
        later = topic_records(step((name, 0), iter([]), state))
        if later:
            assert not state.exists, "decided: nothing left in the state"
            return first, state.watermark, later
    raise AssertionError("the stream never decided")


def test_not_followed_by_pending_at_the_end_of_input(tmp_path):
    placed = {"order_id": 7, "kind": "placed", "event_time": 5 * MINUTE}
    events = [placed, {"order_id": 7, "kind": "shipped", "event_time": 12 * MINUTE}]
    # rules try: the input is finished, so no payment came: an alert, though the 30 minutes had not run out
    tried = rules_try(tmp_path, UNPAID, events)
    assert [(a["kind"], a["measures"]) for a in tried] == [("match", {"order_id": 7})]
    # the stream: pending until the watermark reaches the time limit (35 minutes), which takes later events
    first, watermark, later = _stream(UNPAID, events, lateness_ms=30_000)
    assert first == [] and watermark == 35 * MINUTE - 1
    assert later == tried
    # a payment before the limit ends it, in both
    paid = events + [{"order_id": 7, "kind": "paid", "event_time": 34 * MINUTE}]
    assert rules_try(tmp_path, UNPAID, paid) == [] and spark_static(UNPAID, paid) == []


def test_within_pending_at_the_end_of_input(tmp_path):
    attack = [{"host": "h1", "event_time": i * 1_000} for i in range(4)]
    # rules try: a greedy A{3,} that could still grow is taken as it stands at the end
    tried = rules_try(tmp_path, BURST, attack)
    assert [(a["rows"], a["match_start"], a["match_end"]) for a in tried] == [
        (4, "1970-01-01T00:00:00.000Z", "1970-01-01T00:00:03.000Z")]
    # the stream: reported once the watermark passes the first row's time + WITHIN (it may still grow till then)
    first, watermark, later = _stream(BURST, attack, lateness_ms=30_000)
    assert first == [] and watermark == 2 * MINUTE - 1
    assert later == tried
    # a partial match at the end, EMIT TIMEOUTS: rules try takes the time limit as run out, a timeout record
    question = [{"host": "h2", "kind": "question", "event_time": 1_000}]
    tried = rules_try(tmp_path, REPLIED, question)
    assert [(a["kind"], a["rows"], a["key"]) for a in tried] == [("timeout", 1, {"host": "h2"})]
    first, watermark, later = _stream(REPLIED, question, lateness_ms=0)
    assert first == [] and watermark == 11_000 - 1 and later == tried
    # and a reply in time is a match in both
    answered = question + [{"host": "h2", "kind": "reply", "event_time": 10_999}]
    assert [a["kind"] for a in rules_try(tmp_path, REPLIED, answered)] == ["match"]
    assert spark_static(REPLIED, answered) == rules_try(tmp_path, REPLIED, answered)


def test_a_postgres_sink_writes_key_and_measures_as_json_objects():
    """`freshet run cep --to postgres:TABLE`: the VARIANT columns go to jsonb as the objects they hold."""
    from pyspark.sql.types import VariantType, VariantVal

    from freshet.spark.postgres import column_adapter, pg_type

    adapt = column_adapter(VariantType())
    assert pg_type(VariantType()) == "jsonb"
    held = adapt(VariantVal.parseJson('{"user": "ann", "score": 1.5, "note": null}'))
    assert json.loads(held.dumps(held.adapted)) == {"user": "ann", "score": 1.5, "note": None}


def test_a_state_in_an_earlier_form_is_read_as_the_current_one(tmp_path):
    """A checkpoint written before the compact state (one JSON object: ``{pkey: PartitionMatcher.to_state()}``)
    or before the waiting packs (``F2``: each key's matcher with its buffered events) goes on where it stopped:
    the step reads every form and writes the current one (``F3``)."""
    events = [{"user": u, "device": {"os": "ios"}, "kind": k, "ip": f"10.0.0.{i}", "score": i, "note": "n",
               "city": "Delft", "event_time": i * 1_000}
              for i, (u, k) in enumerate([("ann", "failed"), ("bob", "failed"), ("ann", "failed"), ("bob", "failed"),
                                          ("ann", "ok"), ("bob", "failed"), ("ann", "changed"), ("bob", "ok"),
                                          ("bob", "changed")])]
    compiled = CompiledRule(parse_rule(TAKEOVER))
    name = compiled.name

    def run(form: str) -> tuple[list[dict], str]:
        step, state = _match_step(FixedRules({name: TAKEOVER})), StreamState()
        state.watermark = -1
        records = topic_records(step((name, 0), iter([routed(TAKEOVER, events[:6])]), state))
        state.watermark = 2_500  # rows of both users released (pending attempts), the later ones buffered
        records += topic_records(step((name, 0), iter([]), state))
        written = state.get[0]
        matchers = load_group(compiled, written)
        if form == "first":
            state.update((orjson.dumps({pkey: m.to_state() for pkey, m in matchers.items()}).decode(),))
        elif form == "F2":
            state.update((dump_group(matchers),))
        state.watermark = 5_500
        records += topic_records(step((name, 0), iter([routed(TAKEOVER, events[6:])]), state))
        state.watermark = 60 * MINUTE
        records += topic_records(step((name, 0), iter([]), state))
        return records, written

    compact, written = run("F3")
    assert written.startswith(COMPACT_PACKS) and len(load_group(compiled, written)) == 2
    group = Group.load(compiled, written)
    assert len(group.matchers) == 2 and sorted(e[1] for w in group.waiting for e in unpack(*w[1:])) == [3_000, 4_000, 5_000]
    assert Group.load(compiled, group.dump()).dump() == written
    assert run("F2")[0] == run("first")[0] == compact == rules_try(tmp_path, TAKEOVER, events)
    assert [a["key"]["user"] for a in compact] == ["ann", "bob"]


def test_the_late_events_of_a_pack_are_dropped_as_spark_drops_late_rows():
    """Events travel to the step in packs stamped with their newest time, so Spark drops only packs late as a
    whole; the step drops the events at or behind the watermark of the others, whatever their key."""
    rule = "RULE every PARTITION BY host PATTERN (A)"
    events = [{"host": "h1", "event_time": 5_000}, {"host": "h2", "event_time": 10_000},
              {"host": "h1", "event_time": 10_001}, {"host": "h3", "event_time": 20_000}]
    step, state = _match_step(FixedRules([rule])), StreamState()
    state.watermark = 10_000
    assert topic_records(step(("every", 0), iter([routed(rule, events, per_pack=4)]), state)) == []
    state.watermark = 30_000
    records = topic_records(step(("every", 0), iter([]), state))
    assert [(a["key"]["host"], a["match_start"]) for a in records] == [
        ("h1", "1970-01-01T00:00:10.001Z"), ("h3", "1970-01-01T00:00:20.000Z")]


def test_the_router_packs_for_each_rule_the_fields_it_reads():
    """``route``'s function: per (rule, bucket) one pack of the events the rule wants, each cut down to the fields
    the rule reads (the whole event when it reads them all), with its key, time and (partition, offset) order;
    and a heartbeat row with the newest time of the chunk, an event no rule wants included."""
    import pyarrow as pa

    from freshet.pipelines.cep import _router

    texts = ["RULE logins WHERE kind = 'login' PARTITION BY user PATTERN (A) DEFINE A AS A.status = 'ok'",
             "RULE pays WHERE kind IN ('payment', 'refund') PARTITION BY user PATTERN (P) DEFINE P AS P.amount > 5",
             "RULE any_kind WHERE kind IN ('login', 'payment') PATTERN (A)"]
    events = [{"kind": "login", "user": "ann", "status": "ok", "event_time": 1_000},
              {"kind": "payment", "user": "ann", "amount": 7, "note": "x", "event_time": 2_000},
              {"kind": "refund", "user": "bob", "amount": 9, "event_time": 3_000},
              {"kind": "login", "user": "bob", "status": "failed", "ip": "10.0.0.1", "event_time": 4_000},
              {"kind": "pageview", "user": "bob", "event_time": 9_000}]
    batch = pa.RecordBatch.from_pydict({"value": [json.dumps(e) for e in events], "topic": ["t"] * len(events),
                                        "partition": pa.array([1] * len(events), pa.int32()),
                                        "offset": pa.array(range(len(events)), pa.int64())})
    out = pa.Table.from_batches(list(_router(FixedRules(texts))(iter([batch])))).to_pylist()
    compiled = {c.name: c for c in (CompiledRule(parse_rule(t)) for t in texts)}
    got: dict[str, list] = {}
    for row in out:
        if row["rule"] == "":
            assert row["event_time"].timestamp() * 1000 == 9_000
            continue
        for pkey, when, order, text in unpack(row["pkeys"], row["times"], row["ords"], row["events"]):
            got.setdefault(row["rule"], []).append((json.loads(pkey), when, order, json.loads(text)))
    expected = {name: [(list(c.key_of(e)), e["event_time"], (1 << 40) | i, c.project(e))
                       for i, e in enumerate(events) if c.accepts(e)] for name, c in compiled.items()}
    assert {name: sorted(rows, key=lambda r: r[2]) for name, rows in got.items()} == expected
    assert [r[3] for r in expected["logins"]] == [events[0], {k: v for k, v in events[3].items() if k != "ip"}]


def test_a_measure_beyond_64_bits_is_written_whole():
    """The step writes measures as JSON text through orjson, which writes no integer beyond 64 bits: such a SUM
    is written by the json module instead, whole."""
    from freshet.pipelines.cep import _matches_frame

    frame = _matches_frame([Match("r", ("ann",), 0, 1_000, 2, {"total": 2**70, "city": "Zürich"},
                                  key_names=("user",))])
    assert json.loads(frame["measures"][0]) == {"total": 2**70, "city": "Zürich"}
    assert json.loads(frame["key"][0]) == {"user": "ann"}
