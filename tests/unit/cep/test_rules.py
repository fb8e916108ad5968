"""The rule language: what parses, what it means, and a clear error for what does not."""

from __future__ import annotations

import re

import pytest

from freshet.cep.expressions import RuleSyntaxError
from freshet.cep.rules import Repeat, parse_rule, pattern_text


def test_a_full_rule_parses():
    rule = parse_rule("""
        RULE card_in_two_countries      -- the fraud rule
        FROM payments
        WHERE amount > 0
        PARTITION BY card
        ORDER BY event_time
        MEASURES A.country AS first_country, B.country AS second_country
        PATTERN (A X*? B)
        DEFINE B AS B.country <> A.country
        WITHIN 1 HOUR
        AFTER MATCH SKIP TO NEXT ROW
        EMIT TIMEOUTS
    """)
    assert (rule.name, rule.topic, rule.partition_by, rule.within_ms) == (
        "card_in_two_countries", "payments", (("card",),), 3_600_000)
    assert rule.skip == ("TO NEXT ROW", None) and rule.emit_timeouts
    assert rule.describe() == "A X*? B WITHIN 1 HOUR"
    assert [m[0] for m in rule.measures] == ["first_country", "second_country"]


@pytest.mark.parametrize("text", ["A+", "A*? B", "(A | B C)+ D", "A{2,5}? B{3}", "(A B){2,}", "A{,3} B"])
def test_patterns_write_back_as_they_parse(text):
    pattern = parse_rule(f"RULE r PATTERN ({text})").pattern
    assert parse_rule(f"RULE r PATTERN ({pattern_text(pattern)})").pattern == pattern


def test_quantifier_bounds():
    q = parse_rule("RULE r PATTERN (A{2,4}?)").pattern
    assert q == Repeat(q.node, 2, 4, False)


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("PATTERN (A)", "needs a name"),
    ("hello RULE r PATTERN (A)", "starts with RULE"),
    ("RULE r", "needs a PATTERN"),
    ("RULE r PATTERN (A*)", "can match no rows"),
    ("RULE r PATTERN ((A?)+ B)", "loops forever"),
    ("RULE r PATTERN (A{3,1})", "upper bound is below"),
    ("RULE r PATTERN (A) DEFINE B AS x = 1", "DEFINE names a variable"),
    ("RULE r PATTERN (A) DEFINE A AS x = ", "expected a value"),
    ("RULE r PATTERN (A) DEFINE A AS x = 1 AND", "expected a value"),
    ("RULE r PATTERN (A) WITHIN 2 FORTNIGHTS", "time unit"),
    ("RULE r PATTERN (A) WITHIN 0 SECONDS", "positive"),
    ("RULE r PATTERN (A) NOT FOLLOWED BY B DEFINE B AS x = 1", "needs a time limit"),
    ("RULE r PATTERN (A) NOT FOLLOWED BY B WITHIN 1 MINUTE", "needs a DEFINE"),
    ("RULE r PATTERN (A) AFTER MATCH SKIP TO FIRST Q", "not a variable"),
    ("RULE r PATTERN (A) AFTER MATCH JUMP", "AFTER MATCH SKIP"),
    ("RULE r PATTERN (A) EMIT TIMEOUTS", "needs a time limit"),
    ("RULE r PATTERN (A) MEASURES SUM(*) AS s", "SUM(*)"),
    ("RULE r PATTERN (A) MEASURES COUNT(*) AS n, COUNT(*) AS n", "same name"),
    ("RULE r PATTERN (A) PATTERN (B)", "given twice"),
    ("RULE r PATTERN (A) DEFINE A AS x = 'unterminated", "unexpected"),
    ("RULE bad/name PATTERN (A)", "rule name"),
    ("RULE my-rule-2 FROM web-order-events PATTERN (A) WITHIN", "WITHIN takes a duration"),
])
def test_bad_rules_say_what_is_wrong(text, message):
    with pytest.raises(RuleSyntaxError, match=re.escape(message)):
        parse_rule(text)


def test_lookup_tables_and_case():
    from freshet.cep.matcher import match_events

    rule = parse_rule("""RULE direction PATTERN (C)
        MEASURES CASE WHEN C.record_type = 'MOC' THEN 'outgoing'
                      WHEN C.record_type = 'MTC' THEN 'incoming'
                      WHEN LOOKUP(routes, C.trunk) = 'external' THEN 'transit-out'
                      ELSE 'transit-in' END AS direction
        TABLE routes ('T1' = 'external', 'T2' = 'internal')""")
    events = [{"record_type": t, "trunk": k, "event_time": i}
              for i, (t, k) in enumerate([("MOC", "T2"), ("MTC", "T1"), ("TRANSIT", "T1"), ("TRANSIT", "T2")])]
    assert [m.measures["direction"] for m in match_events(rule, events)] == [
        "outgoing", "incoming", "transit-out", "transit-in"]


def test_names_with_dashes_that_contain_clause_words():
    rule = parse_rule("RULE brute-rule-2 FROM web-order-events PATTERN (A)")
    assert (rule.name, rule.topic) == ("brute-rule-2", "web-order-events")
