"""Conditions on the current row alone run on the row itself (no Frame): the same values as through a Frame."""

from __future__ import annotations

import itertools

import pytest

from freshet.cep.expressions import Frame, compile_expression, compile_row_expression, parse_expression
from freshet.cep.matcher import CompiledRule, match_events
from freshet.cep.rules import parse_rule

ONE_ROW = [
    "x = 'a'", "A.x = 'a'", "x <> 'a'", "n > 2", "n >= 2.5", "n < '3'", "x < 5", "'a' = x", "n = 3",
    "n + 1 > 3 AND x IN ('a', 'b')", "NOT (x = 'b') OR n IS NULL", "x LIKE 'a%'", "m.y = 1", "m.y >= 1",
    "CASE WHEN n > 1 THEN x ELSE 'small' END = 'a'", "LOWER(x) = 'a'", "COALESCE(n, 0) <= 1",
    "LOOKUP(t, x) = 'yes'", "n BETWEEN 1 AND 3", "x = TRUE", "n * 2 = 4", "n % 2 <> 0", "A.n IS NOT NULL",
]
ROWS = [{"x": "a", "n": 3}, {"x": "b", "n": 1}, {"x": "A", "n": "3"}, {"x": 5, "n": None}, {"n": 2.5},
        {"x": "ab", "n": 2, "m": {"y": 1}}, {"x": None, "m": {"y": "1"}}, {"x": True, "n": [1]}, {"m": 3}]
TABLES = {"t": {"a": "yes", "b": "no"}}


@pytest.mark.parametrize("text", ONE_ROW)
def test_a_condition_on_the_row_alone_has_the_value_it_has_through_a_frame(text):
    node = parse_expression(text, frozenset({"A", "B"}))
    on_row = compile_row_expression(node, "A", TABLES)
    on_frame = compile_expression(node)
    assert on_row is not None
    for row in ROWS:
        assert on_row(row) == on_frame(Frame([row], 0, [], 0, "A", TABLES)), row


@pytest.mark.parametrize("text", ["B.x = 'a'", "PREV(n) < n", "COUNT(*) > 2", "SUM(A.n) > 1",
                                  "x = 'a' AND B.n > 1"])
def test_a_condition_on_other_rows_is_not_compiled_for_one_row(text):
    assert compile_row_expression(parse_expression(text, frozenset({"A", "B"})), "A") is None


def test_a_where_with_an_aggregate_still_filters():
    rule = CompiledRule(parse_rule("RULE r WHERE COUNT(*) = 1 AND kind = 'x' PATTERN (A)"))
    assert [rule.accepts(e) for e in ({"kind": "x"}, {"kind": "y"}, {})] == [True, False, False]


@pytest.mark.parametrize("absent", ["S.ok = 1", "S.ok = FIRST(F.ok) + 1"])
def test_absence_on_the_row_and_through_a_frame(absent):
    rule = parse_rule(f"RULE r PATTERN (F) NOT FOLLOWED BY S DEFINE F AS F.ok = 0, S AS {absent} "
                      "WITHIN 10 MILLISECONDS")
    events = [{"ok": ok, "event_time": t} for t, ok in zip(itertools.count(0, 4), [0, 1, 0, 0, 0])]
    assert [m.start_ms for m in match_events(rule, events)] == [8, 12, 16]


def test_count_distinct_of_lists_and_objects():
    rule = parse_rule("RULE r PATTERN (S*? T) DEFINE T AS COUNT(DISTINCT v) >= 3")
    events = [{"v": v, "event_time": t} for t, v in enumerate([[1], [1], {"a": 1}, None, "x"])]
    assert [(m.start_ms, m.rows) for m in match_events(rule, events)] == [(0, 5)]


def test_a_rule_reads_only_its_fields_and_matches_the_cut_down_events_as_the_whole_ones():
    rule = CompiledRule(parse_rule("""RULE r WHERE kind = 'pay' PARTITION BY card.id ORDER BY ts
        MEASURES SUM(A.amount) AS total, LAST(B.shop.name) AS shop, LOOKUP(t, B.country) AS region
        PATTERN (A+ B) DEFINE A AS A.amount < PREV(A.limit), B AS COUNT(DISTINCT A.ip) > 1
        TABLE t ('NL' = 'EU')"""))
    assert set(rule.fields) >= {"kind", "card", "ts", "amount", "shop", "country", "limit", "ip"}
    assert "note" not in rule.fields
    events = [{"kind": "pay", "card": {"id": i % 2}, "ts": i, "amount": a, "limit": 50, "ip": f"ip{i % 3}",
               "shop": {"name": f"s{i}"}, "country": "NL", "note": "x" * 50}
              for i, a in enumerate([10, 20, 60, 5, 7, 90, 1, 2, 3, 80])]
    whole = [m.alert() for m in match_events(rule, events)]
    assert whole and whole == [m.alert() for m in match_events(rule, [rule.project(e) for e in events])]
