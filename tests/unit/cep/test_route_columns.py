"""The routing of `freshet run cep` on a chunk's Arrow columns (``freshet.pipelines.cep_columns``) packs the same
events, keys, times, orders and fields as the event-by-event routing, and hands every chunk it cannot route
exactly to that routing."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from freshet.pipelines import cep_columns
from freshet.pipelines.cep import FixedRules, _Compiled, _router, unpack

RULES = [
    "RULE logins WHERE kind = 'login' PARTITION BY user PATTERN (A) DEFINE A AS A.status = 'ok'",
    "RULE pays WHERE kind IN ('payment', 'refund') PARTITION BY user PATTERN (P) DEFINE P AS P.amount > 5",
    "RULE any_kind WHERE kind IN ('login', 'payment') PATTERN (A)",
    "RULE big WHERE kind = 'payment' AND amount > 100 PARTITION BY user MEASURES P.amount AS amount PATTERN (P)",
    "RULE on_t2 FROM t2 WHERE kind = 'login' PARTITION BY user PATTERN (A)",
    "RULE flagged WHERE kind = 'login' PARTITION BY user MEASURES A.vip AS vip PATTERN (A) DEFINE A AS A.vip",
    # an integer looked up: no text every wanted event holds, so every event is parsed (blank ones too)
    "RULE coded WHERE code IN (5, 7) PARTITION BY code PATTERN (A)",
]

EVENTS = [
    {"kind": "login", "user": "ann", "status": "ok", "event_time": 1_000, "vip": True},
    {"kind": "payment", "user": "ann", "amount": 7, "note": "x", "event_time": 2_000},
    {"kind": "refund", "user": "bob", "amount": 9, "event_time": 3_000},
    {"kind": "login", "user": "bob", "status": "failed", "ip": "10.0.0.1", "event_time": 4_000, "vip": False},
    {"kind": "pageview", "user": "bob", "event_time": 9_000},
    {"kind": "payment", "user": "cyd", "amount": 250, "event_time": 5_000, "status": None},
    {"kind": "login", "user": None, "status": "ok", "event_time": 6_000},
    {"kind": "login", "status": "ok", "event_time": 6_500},
    {"kind": "login", "user": "dee", "status": "ok"},
    {"kind": "payment", "user": "é\u00fc", "amount": 101, "event_time": 7_000},
    {"kind": "alarm", "code": 5, "event_time": 8_000},
    {"kind": "alarm", "code": 6, "event_time": 8_001},
]


def packs(rules: list[str], values: list[str | None], topics: list[str] | None = None, columns: bool = True):
    """The routed rows of one chunk: {rule: sorted (pkey, time, order, event)}, with the heartbeat's time; null
    fields left out of the events (a projection from columns leaves them out, as a missing field reads the same)."""
    batch = pa.RecordBatch.from_pydict({
        "value": pa.array(values, pa.string()), "topic": topics or ["t"] * len(values),
        "partition": pa.array([2] * len(values), pa.int32()), "offset": pa.array(range(len(values)), pa.int64())})
    source = FixedRules(rules)
    router = _Compiled.router(source)
    plan = cep_columns.column_routing(router)
    plan.ok, plan.failures = columns and cep_columns.ColumnRouting(router).ok, 0
    out = pa.Table.from_batches(list(_router(source)(iter([batch])))).to_pylist()
    got: dict = {}
    heartbeat = None
    for row in out:
        if row["rule"] == "":
            heartbeat = row["event_time"]
            continue
        for pkey, when, order, text in unpack(row["pkeys"], row["times"], row["ords"], row["events"]):
            event = {k: v for k, v in json.loads(text).items() if v is not None}
            got.setdefault(row["rule"], []).append((row["bucket"], pkey, when, order, event))
    return {name: sorted(rows, key=lambda r: r[3]) for name, rows in got.items()}, heartbeat, plan


def test_the_columns_route_a_chunk_as_the_events_do():
    values = [json.dumps(e) for e in EVENTS]
    topics = ["t", "t", "t", "t2", "t", "t", "t", "t", "t", "t", "t", "t"]
    by_columns, heartbeat, plan = packs(RULES, values, topics)
    assert plan.failures == 0 and plan.ok  # routed through the columns
    by_events, heartbeat_of_events, _ = packs(RULES, values, topics, columns=False)
    assert by_columns == by_events
    assert heartbeat == heartbeat_of_events
    assert [r[4] for r in by_columns["logins"][:2]] == [
        {"kind": "login", "user": "ann", "status": "ok", "event_time": 1_000},
        {"kind": "login", "user": "bob", "status": "failed", "event_time": 4_000}]
    assert [r[4]["amount"] for r in by_columns["big"]] == [250, 101]
    assert [r[1] for r in by_columns["on_t2"]] == ['["bob"]']
    assert by_columns["any_kind"][0][1] == "[]"
    assert [r[1] for r in by_columns["coded"]] == ["[5]"]


@pytest.mark.parametrize("odd", [
    '{"kind": "login", "user": "eve", "event_time": NaN}',  # orjson refuses it, Arrow's reader takes it
    '{"kind": "login", "user": "eve", "event_time": 7000}\n',  # not one a line
    '   ',
    '{"kind": "login", "user": "eve", "event_time": 7000} {"kind": "login", "user": "fay", "event_time": 7001}',
    '{"kind": "login", "user": "eve", "user": "fay", "event_time": 7000}',  # a field twice
    '{"kind": "login", "user": 5.5, "event_time": 7000}',  # a key that is not a text
    '{"kind": "login", "user": "eve", "event_time": "1970-01-01T00:00:07Z"}',  # a time as text
    '{"kind": "login", "user": "eve", "event_time": 7000.0}',
    '[1, 2]',
    '{"kind": "alarm", "code": "5", "event_time": 8002}',  # a field's type changing
    None,
])
def test_a_chunk_the_columns_cannot_route_exactly_is_routed_event_by_event(odd):
    values = [json.dumps(e) for e in EVENTS] + [odd]
    by_columns, heartbeat, plan = packs(RULES, values)
    assert plan.failures == 1
    assert (by_columns, heartbeat) == packs(RULES, values, columns=False)[:2]


@pytest.mark.parametrize("event", [
    {"kind": "login", "user": "eve", "status": 'say "hi"', "event_time": 7_000},  # a text JSON escapes
    {"kind": "login", "user": "eve", "status": {"code": 3}, "event_time": 7_000},  # an object
    {"kind": "login", "user": "eve", "status": 1.5, "event_time": 7_000},  # a float: it may have been 2
    {"kind": "login", "user": "eve", "status": [1, 2], "event_time": 7_000},
])
def test_a_field_the_columns_cannot_write_is_projected_event_by_event(event):
    values = [json.dumps(e) for e in EVENTS[1:3]] + [json.dumps(event)]  # the only status
    by_columns, heartbeat, plan = packs(RULES, values)
    assert plan.failures == 0
    assert (by_columns, heartbeat) == packs(RULES, values, columns=False)[:2]
    assert by_columns["logins"] == [(by_columns["logins"][0][0], '["eve"]', 7_000, (2 << 40) | 2, event)]
