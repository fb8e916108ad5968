"""The matcher against golden answers (Oracle's and Flink's documented examples) and against a
brute-force reference on random patterns and event streams, in order and out of order."""

from __future__ import annotations

import random

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshet.cep.matcher import CompiledRule, PartitionMatcher, match_events
from freshet.cep.rules import Alt, Repeat, Seq, Var, parse_rule, pattern_text

from .reference import reference_matches

# Oracle Database Data Warehousing Guide, "SQL for Pattern Matching", example 20-1: V shapes in a ticker
ACME = [12, 17, 19, 21, 25, 12, 15, 20, 24, 25, 19, 15, 25, 25, 14, 12, 14, 24, 23, 22]
V_SHAPE = """
RULE v_shape
PARTITION BY symbol
ORDER BY day
MEASURES FIRST(STRT.day) AS start_day, LAST(DOWN.day) AS bottom_day, LAST(UP.day) AS end_day
PATTERN (STRT DOWN+ UP+)
DEFINE DOWN AS DOWN.price < PREV(DOWN.price),
       UP AS UP.price > PREV(UP.price)
AFTER MATCH SKIP TO LAST UP
"""


def test_oracle_v_shape_example():
    events = [{"symbol": "ACME", "day": day, "price": price} for day, price in enumerate(ACME, start=1)]
    found = [(m.measures["start_day"], m.measures["bottom_day"], m.measures["end_day"])
             for m in match_events(parse_rule(V_SHAPE), events)]
    assert found == [(5, 6, 10), (10, 12, 13), (14, 16, 18)]


def _labels(rule_text: str, names: str) -> list[str]:
    events = [{"name": n, "event_time": i} for i, n in enumerate(names.split())]
    return [" ".join(events[m.start_ms + i]["name"] for i in range(m.rows))
            for m in match_events(parse_rule(rule_text), events)]


def test_flink_skip_strategies_example():
    # Flink CEP docs, "After Match Skip Strategy": pattern b+ c over b1 b2 b3 c
    base = "RULE r PATTERN (B+ C) DEFINE B AS name LIKE 'b%', C AS name = 'c' "
    names = "b1 b2 b3 c"
    assert _labels(base + "AFTER MATCH SKIP TO NEXT ROW", names) == ["b1 b2 b3 c", "b2 b3 c", "b3 c"]
    assert _labels(base + "AFTER MATCH SKIP PAST LAST ROW", names) == ["b1 b2 b3 c"]
    assert _labels(base + "AFTER MATCH SKIP TO FIRST B", names) == ["b1 b2 b3 c", "b2 b3 c", "b3 c"]
    assert _labels(base + "AFTER MATCH SKIP TO LAST B", names) == ["b1 b2 b3 c", "b3 c"]


def test_greedy_and_reluctant():
    base = "RULE r PATTERN (A {} B) DEFINE A AS name = 'a', B AS name IN ('a', 'b') AFTER MATCH SKIP TO NEXT ROW"
    assert _labels(base.format("+"), "a a a b") == ["a a a b", "a a b", "a b"]
    assert _labels(base.format("+?"), "a a a b") == ["a a", "a a", "a b"]
    assert _labels(base.format("{2}"), "a a a b") == ["a a a", "a a b"]
    assert _labels(base.format("{1,2}?"), "a a a b") == ["a a", "a a", "a b"]


def test_relaxed_contiguity_and_within():
    rule = parse_rule("""RULE r PARTITION BY card MEASURES A.country AS a, B.country AS b
        PATTERN (A X*? B) DEFINE B AS B.country <> A.country WITHIN 1 HOUR""")
    hour = 3_600_000
    events = [{"card": 1, "country": "NL", "event_time": 0}, {"card": 1, "country": "NL", "event_time": 10},
              {"card": 1, "country": "DE", "event_time": 20},
              {"card": 2, "country": "NL", "event_time": 0}, {"card": 2, "country": "DE", "event_time": hour}]
    found = [(m.key, m.measures) for m in match_events(rule, events)]
    assert found == [((1,), {"a": "NL", "b": "DE"})]  # card 2's second country came an hour later


def test_absence_within_a_time_limit():
    rule = parse_rule("""RULE unpaid PARTITION BY order_id MEASURES A.order_id AS order_id
        PATTERN (A) NOT FOLLOWED BY P DEFINE A AS kind = 'placed', P AS kind = 'paid' WITHIN 30 MINUTES""")
    minute = 60_000
    events = [{"order_id": 1, "kind": "placed", "event_time": 0},
              {"order_id": 1, "kind": "paid", "event_time": 10 * minute},
              {"order_id": 2, "kind": "placed", "event_time": 0},
              {"order_id": 2, "kind": "paid", "event_time": 31 * minute},
              {"order_id": 3, "kind": "placed", "event_time": 5 * minute}]
    assert sorted(m.measures["order_id"] for m in match_events(rule, events)) == [2, 3]

    # on a stream the absence is known only when the watermark passes the limit
    compiled = CompiledRule(rule)
    matcher = PartitionMatcher(compiled, (3,))
    matcher.add(events[4], 5 * minute)
    assert matcher.advance(20 * minute) == []
    assert matcher.next_deadline() == 35 * minute - 1
    assert [m.measures["order_id"] for m in matcher.advance(35 * minute)] == [3]


def test_timeouts_go_to_the_side_output():
    rule = parse_rule("""RULE r PATTERN (A B) DEFINE A AS name = 'a', B AS name = 'b' WITHIN 10 SECONDS
        EMIT TIMEOUTS""")
    matcher = PartitionMatcher(CompiledRule(rule))
    matcher.add({"name": "a", "event_time": 0}, 0)
    assert matcher.advance(9_000) == []  # B may still come
    timed_out = matcher.advance(10_000)
    assert [(m.kind, m.start_ms, m.rows) for m in timed_out] == [("timeout", 0, 1)]
    matcher.add({"name": "a", "event_time": 30_000}, 30_000)
    matcher.add({"name": "b", "event_time": 31_000}, 31_000)
    assert [(m.kind, m.start_ms, m.rows) for m in matcher.advance(32_000)] == [("match", 30_000, 2)]
    # a partial match ended by a row that does not fit is no timeout
    matcher.add({"name": "a", "event_time": 40_000}, 40_000)
    matcher.add({"name": "c", "event_time": 41_000}, 41_000)
    assert matcher.advance(100_000) == []


# ---- random patterns against the reference ----------------------------------------------------------

VARS = ("A", "B", "C")


def patterns(depth: int = 2):
    leaf = st.sampled_from(VARS).map(Var)
    if depth == 0:
        return leaf
    sub = patterns(depth - 1)
    return st.one_of(
        leaf,
        st.lists(sub, min_size=2, max_size=3).map(lambda items: Seq(tuple(items))),
        st.lists(sub, min_size=2, max_size=3).map(lambda options: Alt(tuple(options))),
        st.tuples(sub, st.sampled_from([(0, None), (1, None), (0, 1), (2, 2), (1, 3), (2, None), (0, 2)]),
                  st.booleans()).map(lambda t: Repeat(t[0], t[1][0], t[1][1], t[2])),
    )


CONDITIONS = [
    "{v}.x = 'a'", "{v}.x <> 'c'", "{v}.n > PREV({v}.n)", "{v}.n >= 2", "COUNT({v}.*) <= 2",
    "{v}.x = FIRST(A.x)", "SUM(n) < 9", "COUNT(DISTINCT x) >= 2", "{v}.n < '3' AND {v}.x IN ('a', 'b')", None,
]
SKIPS = ["PAST LAST ROW", "TO NEXT ROW", "TO FIRST A", "TO LAST B"]


@st.composite
def rules(draw):
    pattern = draw(patterns())
    text = pattern_text(pattern)
    defines = []
    for v in VARS:
        condition = draw(st.sampled_from(CONDITIONS))
        if condition is not None:
            defines.append(f"{v} AS {condition.format(v=v)}")
    within = draw(st.sampled_from(["", "WITHIN 5 MILLISECONDS", "WITHIN 3 MILLISECONDS"]))
    skip = draw(st.sampled_from(SKIPS))
    source = (f"RULE r PARTITION BY k MEASURES COUNT(*) AS rows, LAST(n) AS last_n PATTERN ({text}) "
              + (f"DEFINE {', '.join(defines)} " if defines else "") + f"{within} AFTER MATCH SKIP {skip}")
    try:
        return parse_rule(source)
    except ValueError:  # patterns that can match nothing are refused by the parser
        from hypothesis import assume
        assume(False)


events_strategy = st.lists(
    st.tuples(st.sampled_from([0, 1]), st.sampled_from("abc"), st.integers(0, 4), st.integers(0, 12)),
    min_size=0, max_size=9,
).map(lambda rows: [{"k": k, "x": x, "n": n, "event_time": t} for k, x, n, t in rows])


def _ours(rule, events):
    compiled = CompiledRule(rule)
    found = match_events(compiled, events)
    return sorted((m.key, m.labels, m.start_ms, m.measures["rows"], m.measures["last_n"]) for m in found)


def _theirs(rule, events):
    out = []
    for key, start, labels, measures in reference_matches(rule, events):
        rows = sorted((e for e in events if (e["k"],) == key), key=lambda e: e["event_time"])
        out.append((key, labels, rows[start]["event_time"], measures["rows"], measures["last_n"]))
    return sorted(out)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(rules(), events_strategy)
def test_every_construct_against_the_reference(rule, events):
    assert _ours(rule, events) == _theirs(rule, events)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(rules(), events_strategy, st.randoms(use_true_random=False), st.integers(0, 4))
def test_a_stream_out_of_order_matches_as_the_sorted_whole(rule, events, rnd, disorder):
    """Events arrive shuffled up to ``disorder`` ms out of order, with the watermark ``disorder`` behind
    the newest; matched as they come, the result is the whole sorted sequence's."""
    compiled = CompiledRule(rule)
    arrival = sorted(enumerate(events), key=lambda p: p[1]["event_time"] + rnd.uniform(0, disorder))
    matchers: dict = {}
    found = []
    newest = None
    for seq, event in arrival:
        key = compiled.key_of(event)
        matcher = matchers.setdefault(key, PartitionMatcher(compiled, key))
        when = event["event_time"]
        newest = when if newest is None else max(newest, when)
        # an event comes as an object or as its JSON text (as the Spark step hands them over)
        added = matcher.add(event, when, seq) if rnd.random() < 0.5 else matcher.add_text(
            orjson.dumps(event).decode(), when, seq)
        assert added, "no event may be late when the watermark allows the disorder"
        if rnd.random() < 0.5:
            watermark = newest - disorder - 1
            for m in matchers.values():
                found.extend(m.advance(watermark))
                # the state survives being written out and read back (as Spark's state store does), in
                # either form
                if rnd.random() < 0.5:
                    matchers[m.key] = PartitionMatcher.from_state(compiled, m.key, orjson.loads(
                        orjson.dumps(m.to_state())))
                else:
                    lines = ["before"]
                    numbers = orjson.loads(orjson.dumps(m.to_compact(lines)))
                    lines = "\n".join([*lines, "after"]).split("\n")
                    matchers[m.key], end = PartitionMatcher.from_compact(compiled, m.key, numbers, lines, 1)
                    assert lines[end] == "after"
    for m in matchers.values():
        found.extend(m.advance(None, closed=True))
    ours = sorted((m.key, m.labels, m.start_ms, m.measures["rows"], m.measures["last_n"]) for m in found)
    assert ours == _ours(rule, events)


def test_late_events_are_dropped_and_counted():
    compiled = CompiledRule(parse_rule("RULE r PATTERN (A)"))
    matcher = PartitionMatcher(compiled)
    matcher.add({"event_time": 10}, 10)
    assert len(matcher.advance(10)) == 1
    assert matcher.add({"event_time": 5}, 5) is False
    assert matcher.late == 1


def test_state_is_let_go_behind_the_watermark():
    compiled = CompiledRule(parse_rule("RULE r PATTERN (A B) DEFINE A AS x = 1, B AS x = 2 WITHIN 10 MILLISECONDS"))
    matcher = PartitionMatcher(compiled)
    rng = random.Random(3)
    for t in range(5000):
        matcher.add({"x": rng.choice([1, 2, 3]), "event_time": t}, t)
        if t % 100 == 0:
            matcher.advance(t - 1)
    matcher.advance(5100)
    assert len(matcher.rows) < 200 and not matcher.buffer


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([
    "PATTERN (S*? T) DEFINE T AS COUNT(DISTINCT x) >= 3",  # the count over the rows so far grows a row at a time
    "PATTERN (A B+ C?) DEFINE B AS COUNT(DISTINCT x) <= 2, C AS COUNT(DISTINCT n) > 2",
    "PATTERN ((A | B)+ C) DEFINE A AS COUNT(DISTINCT x) < 2, C AS COUNT(DISTINCT x) = 3 WITHIN 5 MILLISECONDS",
]), st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 3), st.integers(0, 20)), max_size=14))
def test_a_distinct_count_over_the_match_so_far_against_the_reference(tail, rows):
    rule = parse_rule(f"RULE r PARTITION BY k MEASURES COUNT(*) AS rows, LAST(n) AS last_n {tail}")
    events = [{"k": 0, "x": x, "n": n, "event_time": t} for x, n, t in rows]
    assert _ours(rule, events) == _theirs(rule, events)
