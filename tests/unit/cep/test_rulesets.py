"""The shipped rules do what their comments say, on generated and hand-made events."""

from __future__ import annotations

from freshet.cep.matcher import CompiledRule, PartitionMatcher, match_events
from freshet.cep.rulesets import names, ruleset, split_rules, text
from freshet.gen.security_events import security_events

MINUTE = 60_000


def test_every_shipped_rule_parses():
    assert names() == ["fraud", "intrusion", "telco"]
    for name in names():
        assert len(ruleset(name)) == len(split_rules(text(name))) >= 1


def test_intrusion_alerts_are_the_planted_attacks():
    generated = security_events(30_000, attacks=4, seed=3)
    found = [m for rule in ruleset("intrusion") for m in match_events(rule, generated.events)]
    assert sorted((m.rule, m.key[0]) for m in found) == sorted((p.rule, p.host) for p in generated.planted)
    planted = {(p.rule, p.host): p for p in generated.planted}
    for m in found:
        p = planted[(m.rule, m.key[0])]
        assert p.start_ms <= m.start_ms <= m.end_ms <= p.end_ms
        if m.rule == "brute_force":
            assert m.measures["attempts"] == p.events  # the greedy pattern takes the whole attack
        if m.rule == "http_scan":
            assert m.measures["names"] == 6  # the alert comes at the sixth distinct name


def test_intrusion_on_a_stream_out_of_order():
    generated = security_events(20_000, attacks=3, seed=5, out_of_order=0.2, max_disorder_ms=5_000)
    found = []
    for rule in ruleset("intrusion"):
        compiled = CompiledRule(rule)
        matchers: dict = {}
        newest = 0
        for seq, event in enumerate(generated.events):
            key, when = compiled.key_of(event), compiled.time_of(event)
            newest = max(newest, when)
            if compiled.accepts(event):
                matchers.setdefault(key, PartitionMatcher(compiled, key)).add(event, when, seq)
            if seq % 500 == 0:  # a microbatch: the watermark 10 s behind the newest event
                for m in list(matchers.values()):
                    found.extend(m.advance(newest - 10_000))
                    if m.idle:
                        del matchers[m.key]
        for m in matchers.values():
            found.extend(m.advance(None, closed=True))
    assert sorted((m.rule, m.key[0]) for m in found) == sorted((p.rule, p.host) for p in generated.planted)


def test_fraud_rules():
    two_countries, takeover = ruleset("fraud")
    payments = [{"card": "c1", "country": "NL", "amount": 10, "event_time": 0},
                {"card": "c1", "country": "NL", "amount": 12, "event_time": 10 * MINUTE},
                {"card": "c1", "country": "BR", "amount": 900, "event_time": 50 * MINUTE},
                {"card": "c2", "country": "NL", "amount": 10, "event_time": 0},
                {"card": "c2", "country": "BE", "amount": 10, "event_time": 61 * MINUTE}]
    assert [(m.measures["card"], m.measures["first_country"], m.measures["second_country"])
            for m in match_events(two_countries, payments)] == [("c1", "NL", "BR")]
    logins = [{"user": "ann", "kind": k, "event_time": i * MINUTE} for i, k in enumerate(
        ["login_failed"] * 4 + ["login_ok", "password_change"])]
    logins += [{"user": "bob", "kind": k, "event_time": i * MINUTE} for i, k in enumerate(
        ["login_failed", "login_failed", "login_ok", "password_change"])]  # two failures: no alert
    assert [(m.measures["user"], m.measures["failures"]) for m in match_events(takeover, logins)] == [("ann", 4)]


def test_telco_call_direction():
    (rule,) = ruleset("telco")
    cdrs = [("MOC", "AMS-CORE-1", "KPN-INT-1"), ("MTC", "KPN-INT-1", "AMS-CORE-1"),
            ("TRANSIT", "BT-UK-7", "DT-DE-4"), ("TRANSIT", "VDF-INT-2", "RTM-CORE-2"),
            ("TRANSIT", "RTM-CORE-2", "BT-UK-7"), ("TRANSIT", "AMS-CORE-1", "UTR-EDGE-3"),
            ("TRANSIT", "AMS-CORE-1", "NOWHERE-9")]
    events = [{"call_id": f"call{i}", "record_type": t, "in_route": a, "out_route": b, "event_time": i}
              for i, (t, a, b) in enumerate(cdrs)]
    found = sorted(match_events(rule, events), key=lambda m: m.start_ms)
    assert [m.measures["direction"] for m in found] == [
        "outgoing", "incoming", "transit", "incoming", "outgoing", "internal", "unknown route"]


def test_the_router_sends_each_event_where_the_where_clauses_do():
    from freshet.cep.matcher import RuleRouter
    from freshet.cep.rules import parse_rule

    rules = [CompiledRule(r) for r in ruleset("intrusion") + ruleset("fraud") + ruleset("telco")] + [
        CompiledRule(parse_rule("RULE both WHERE group = 'p2p' AND dst_port > 1000 PATTERN (A)")),
        CompiledRule(parse_rule("RULE numeric WHERE dst_port = 22 PATTERN (A)")),
        CompiledRule(parse_rule("RULE only_web FROM web PATTERN (A)")),
        # IN lists are looked up by each of their values as equalities are; NOT IN is evaluated
        CompiledRule(parse_rule("RULE in_list WHERE kind IN ('login', 'payment') PATTERN (A)")),
        CompiledRule(parse_rule("RULE in_mixed WHERE kind IN ('login', 5, 'login') AND amount > 1 PATTERN (A)")),
        CompiledRule(parse_rule("RULE not_in WHERE kind NOT IN ('login') PATTERN (A)"))]
    router = RuleRouter(rules)
    generated = security_events(3000, attacks=2, seed=9)
    odd = [{"group": ["p2p"]}, {"group": None}, {"dst_port": 22.0}, {"dst_port": "22"}, {}, {"group": {"a": 1}},
           *({"kind": kind, "amount": amount} for kind in ("login", "payment", "pageview", 5, "5", 5.0, True,
                                                           ["login"], None) for amount in (0, 2, None))]
    for event in generated.events + odd:
        for topic in ("web", "other"):
            expected = [r.name for r in rules if r.rule.topic in (None, topic) and r.accepts(event)]
            assert sorted(r.name for r in router.rules_for(event, topic)) == sorted(expected)


def test_event_times_in_the_shapes_they_come():
    from freshet.cep.matcher import event_time_ms

    assert event_time_ms("2026-01-01T00:00:01.5Z") == 1_767_225_601_500
    assert event_time_ms("2026-01-01T00:00:01.123456+01:00") == 1_767_225_601_123 - 3_600_000
    assert event_time_ms("2026-01-01 00:00:01") == 1_767_225_601_000
    assert event_time_ms(1_767_225_601_000) == 1_767_225_601_000
    assert event_time_ms("yesterday") is None and event_time_ms(None) is None and event_time_ms(True) is None
    assert event_time_ms("2026-13-01T00:00:01.5Z") is None


def test_the_router_names_the_texts_an_event_must_hold():
    from freshet.cep.matcher import RuleRouter
    from freshet.cep.rules import parse_rule

    intrusion = [CompiledRule(r) for r in ruleset("intrusion")]
    assert RuleRouter(intrusion).needles == ("generalbruteforce", "httpscan", "p2p")
    # a rule without an equality to look for, or with a value JSON may escape: every event is parsed
    assert RuleRouter(intrusion + [CompiledRule(parse_rule("RULE r WHERE x > 1 PATTERN (A)"))]).needles is None
    assert RuleRouter([CompiledRule(parse_rule("RULE r WHERE path = '/login' PATTERN (A)"))]).needles is None
    assert RuleRouter([CompiledRule(parse_rule("RULE r WHERE port = 22 PATTERN (A)"))]).needles is None
    assert RuleRouter([CompiledRule(parse_rule("RULE r WHERE kind IN ('login', 'payment') PATTERN (A)"))]
                      ).needles == ("login", "payment")
    assert RuleRouter([CompiledRule(parse_rule("RULE r WHERE kind IN ('login', 'a/b') PATTERN (A)"))]).needles is None
