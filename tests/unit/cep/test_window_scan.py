"""The matcher's shortcuts against its plain attempts: the window scan of ``S*? T`` with a growing count (the
port scan: ``COUNT(DISTINCT dst_port) > 7``) and the start rows no match can begin at, skipped. Each must find what
an attempt from every start row finds (the same matches, timeouts and pending start), in a whole sequence and on a
stream, with ties in time, repeated values and rows exactly at the time limit."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshet.cep.matcher import CompiledRule, PartitionMatcher, WindowScan, first_row_test, match_events
from freshet.cep.rules import parse_rule

from .reference import reference_matches
from .test_matcher import events_strategy, rules

PORT_SCAN = """RULE port_scan PARTITION BY src_ip
    MEASURES FIRST(src_ip) AS src_ip, COUNT(DISTINCT dst_port) AS ports, COUNT(*) AS probes
    PATTERN (S*? T) DEFINE T AS COUNT(DISTINCT dst_port) > 7 WITHIN 1 MINUTE"""


def plain(compiled: CompiledRule) -> CompiledRule:
    """The same rule run by attempts from every start row: no window scan, no start row skipped."""
    other = CompiledRule(compiled.rule)
    other.scan = other.first_row = None
    return other


def found(matches) -> list:
    return sorted((m.key, m.kind, m.start_ms, m.end_ms, m.labels, orjson.dumps(m.measures, option=orjson.OPT_SORT_KEYS))
                  for m in matches)


def streamed(compiled: CompiledRule, events: list[dict], every: int, lateness: int) -> list:
    """Matches of events fed in time order, the watermark ``lateness`` behind the newest every ``every`` events
    (attempts left pending between the calls), then the end of input."""
    matchers: dict = {}
    out = []
    for seq, event in enumerate(sorted(events, key=lambda e: e["event_time"])):
        key = compiled.key_of(event)
        matchers.setdefault(key, PartitionMatcher(compiled, key)).add(event, event["event_time"], seq)
        if seq % every == every - 1:
            for matcher in matchers.values():
                out.extend(matcher.advance(event["event_time"] - lateness - 1))
    for matcher in matchers.values():
        out.extend(matcher.advance(None, closed=True))
    return found(out)


def test_the_port_scan_rule_takes_the_window_scan():
    assert WindowScan.of(CompiledRule(parse_rule(PORT_SCAN))) is not None
    for tail in ["PATTERN (S*? T) DEFINE T AS COUNT(*) >= 3 AND T.x = 'a'",
                 "PATTERN (S*? T) DEFINE T AS 2 < COUNT(DISTINCT x) AND COUNT(x) >= 4"]:
        assert WindowScan.of(CompiledRule(parse_rule(f"RULE r {tail}"))) is not None, tail


@pytest.mark.parametrize("tail", [
    "PATTERN (S* T) DEFINE T AS COUNT(DISTINCT x) > 2",  # greedy: the last row T holds at, not the first
    "PATTERN (S*? T) DEFINE S AS x = 'a', T AS COUNT(DISTINCT x) > 2",  # S is not any row
    "PATTERN (S*? T) DEFINE T AS COUNT(DISTINCT x) < 3",  # a count that falls as rows come
    "PATTERN (S*? T) DEFINE T AS COUNT(DISTINCT S.x) > 2",  # S's rows, not the match's
    "PATTERN (S*? T) DEFINE T AS SUM(n) > 3",  # a sum can fall (negative values)
    "PATTERN (S*? T) DEFINE T AS COUNT(DISTINCT x) > 2 OR x = 'a'",
    "PATTERN (S*? T) DEFINE T AS x = 'a'",  # no count: the attempt stops at the first such row anyway
    "PATTERN (S*? T) DEFINE T AS COUNT(*) > 2 AND PREV(x) = 'a'",
    "PATTERN (S*? T) NOT FOLLOWED BY U DEFINE T AS COUNT(*) > 2, U AS x = 'a' WITHIN 1 MINUTE",
    "PATTERN (A S*? T) DEFINE T AS COUNT(*) > 2",
])
def test_other_patterns_and_conditions_keep_the_attempts(tail):
    assert WindowScan.of(CompiledRule(parse_rule(f"RULE r {tail}"))) is None


SCAN_CONDITIONS = [
    "COUNT(DISTINCT x) > 2", "COUNT(DISTINCT x) >= 3", "2 < COUNT(DISTINCT x)", "COUNT(DISTINCT x) > 1",
    "COUNT(x) >= 3", "COUNT(*) > 3", "COUNT(DISTINCT x) > 1 AND T.n >= 2", "COUNT(DISTINCT n) >= 2.5",
    "COUNT(DISTINCT x) >= 2 AND COUNT(*) > 2 AND T.x <> 'c'", "COUNT(DISTINCT o.y) > 1",
]
SKIPS = ["", "AFTER MATCH SKIP TO NEXT ROW", "AFTER MATCH SKIP TO LAST T", "AFTER MATCH SKIP TO FIRST S"]

# ties in time (times from a few values), repeated and missing values, a nested field
scan_events = st.lists(
    st.tuples(st.sampled_from([0, 1]), st.sampled_from(["a", "b", "c", "d", None]), st.integers(0, 3),
              st.integers(0, 14), st.sampled_from([1, 2, 1.0, True, None])),
    max_size=24,
).map(lambda rows: [{"k": k, "n": n, "event_time": t, "o": {"y": y}, **({"x": x} if x is not None else {})}
                    for k, x, n, t, y in rows])


def scan_rule(condition: str, within: str, skip: str, timeouts: bool):
    return parse_rule(f"RULE r PARTITION BY k MEASURES COUNT(*) AS rows, COUNT(DISTINCT x) AS xs, LAST(n) AS last_n "
                      f"PATTERN (S*? T) DEFINE T AS {condition} {within} {skip} {'EMIT TIMEOUTS' if timeouts else ''}")


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(SCAN_CONDITIONS), st.sampled_from(["", "WITHIN 3 MILLISECONDS", "WITHIN 5 MILLISECONDS"]),
       st.sampled_from(SKIPS), st.booleans(), scan_events)
def test_the_window_scan_finds_what_the_attempts_find(condition, within, skip, timeouts, events):
    if timeouts and not within:
        timeouts = False  # EMIT TIMEOUTS needs a time limit
    compiled = CompiledRule(scan_rule(condition, within, skip, timeouts))
    assert compiled.scan is not None
    assert found(match_events(compiled, events)) == found(match_events(plain(compiled), events))
    theirs = sorted((key, labels) for key, _start, labels, _m in reference_matches(compiled.rule, events))
    assert sorted((m.key, m.labels) for m in match_events(compiled, events) if m.kind == "match") == theirs


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(SCAN_CONDITIONS), st.sampled_from(["", "WITHIN 3 MILLISECONDS", "WITHIN 5 MILLISECONDS"]),
       st.sampled_from(SKIPS), st.booleans(), scan_events, st.integers(1, 5), st.integers(0, 3))
def test_the_window_scan_on_a_stream_as_the_attempts(condition, within, skip, timeouts, events, every, lateness):
    """Pending attempts carried between the matcher's calls: what comes out, and when, is the attempts'."""
    if timeouts and not within:
        timeouts = False
    compiled = CompiledRule(scan_rule(condition, within, skip, timeouts))
    ours = streamed(compiled, events, every, lateness)
    assert ours == streamed(plain(compiled), events, every, lateness)
    assert ours == found(match_events(compiled, events))


def test_a_row_exactly_at_the_time_limit_is_outside_the_window():
    compiled = CompiledRule(scan_rule("COUNT(DISTINCT x) >= 3", "WITHIN 3 MILLISECONDS", "AFTER MATCH SKIP TO NEXT ROW",
                                      True))
    # from the row at 0, the row at 3 is too late; from the rows at 1, it is in
    events = [{"k": 0, "x": x, "n": 0, "event_time": t} for x, t in [("a", 0), ("b", 1), ("a", 1), ("c", 3)]]
    ours = [(m.kind, m.start_ms, m.end_ms, m.rows) for m in match_events(compiled, events)]
    assert ours == [("timeout", 0, 1, 3), ("match", 1, 3, 3), ("timeout", 1, 3, 2), ("timeout", 3, 3, 1)]
    assert found(match_events(compiled, events)) == found(match_events(plain(compiled), events))


def test_the_window_scan_pends_until_the_horizon_passes_the_time_limit():
    compiled = CompiledRule(scan_rule("COUNT(DISTINCT x) >= 3", "WITHIN 10 MILLISECONDS", "", True))
    rows = [{"k": 0, "x": x, "n": 0, "event_time": t} for x, t in [("a", 0), ("a", 2), ("b", 4)]]
    times = [0, 2, 4]
    assert compiled.match_rows(rows, times, (0,), 0, False, 5) == ([], 0)  # a third port may still come
    matches, start = compiled.match_rows(rows, times, (0,), 0, False, 10)  # the limit of the row at 0 passed
    assert [(m.kind, m.start_ms, m.rows) for m in matches] == [("timeout", 0, 3)] and start == 1
    assert plain(compiled).match_rows(rows, times, (0,), 0, False, 10)[1] == 1


class CountingRows(list):
    """Rows that count how often the matcher reads one."""
    reads = 0

    def __getitem__(self, index):
        CountingRows.reads += 1
        return super().__getitem__(index)


def test_the_window_scan_reads_each_row_a_few_times_not_once_per_start():
    compiled = CompiledRule(parse_rule(PORT_SCAN))
    n = 3_000  # a port a second, four ports: never more than 7 in a minute
    rows = CountingRows({"src_ip": "s", "dst_port": 80 + i % 4, "event_time": i * 1000} for i in range(n))
    times = [r["event_time"] for r in rows]
    CountingRows.reads = 0
    assert compiled.match_rows(rows, times, ("s",))[0] == []
    scan_reads = CountingRows.reads
    CountingRows.reads = 0
    assert plain(compiled).match_rows(rows, times, ("s",))[0] == []
    assert scan_reads <= 4 * n < 30 * n <= CountingRows.reads  # the attempts read a minute's rows from each start


def test_a_first_row_test_is_what_every_first_variable_needs_of_its_row():
    def first(tail):
        compiled = CompiledRule(parse_rule(f"RULE r {tail}"))
        return compiled.first_row

    locked_out = first("PATTERN (F) NOT FOLLOWED BY S DEFINE F AS F.status = 'failed' AND PREV(F.status) = 'failed', "
                       "S AS S.status = 'ok' WITHIN 1 MINUTE")
    assert locked_out({"status": "failed"}) and not locked_out({"status": "ok"}) and not locked_out({})
    either = first("PATTERN (A? B C) DEFINE A AS x = 1, B AS x = 2 AND COUNT(*) < 3")
    assert either({"x": 1}) and either({"x": 2}) and not either({"x": 3})
    assert first("PATTERN (A X*? B) DEFINE B AS B.country <> A.country") is None  # A: any row
    assert first("PATTERN (A? B) DEFINE A AS x = 1") is None  # B: any row
    assert first("PATTERN (A B) DEFINE A AS PREV(x) = 1") is None  # nothing on the row alone
    assert first_row_test([("done",)], {}, {}) is None  # a program that matches no row


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(rules(), events_strategy, st.integers(1, 4), st.integers(0, 3))
def test_skipping_start_rows_finds_what_the_attempts_find(rule, events, every, lateness):
    compiled = CompiledRule(rule)
    assert found(match_events(compiled, events)) == found(match_events(plain(compiled), events))
    assert streamed(compiled, events, every, lateness) == streamed(plain(compiled), events, every, lateness)
