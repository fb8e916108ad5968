"""A matcher read back from its compact state parses its rows only when it reads them: one that gets no new row
and whose pending attempt's time limit is not reached writes its state back as it came, unparsed; one that reads
them matches as it would have."""

from __future__ import annotations

import orjson

from freshet.cep.matcher import CompiledRule, PartitionMatcher
from freshet.cep.rules import parse_rule

RULE = CompiledRule(parse_rule("RULE r PARTITION BY u MEASURES COUNT(*) AS rows PATTERN (A B+ C) "
                               "DEFINE A AS k = 'a', B AS k = 'b', C AS k = 'c' WITHIN 1 MINUTE"))


def stored(matcher: PartitionMatcher) -> tuple[list, list[str]]:
    lines: list[str] = []
    numbers = orjson.loads(orjson.dumps(matcher.to_compact(lines)))
    return numbers, lines


def loaded(numbers: list, lines: list[str]) -> PartitionMatcher:
    matcher, end = PartitionMatcher.from_compact(RULE, ("x",), numbers, lines, 0)
    assert end == len(lines)
    return matcher


def pending() -> PartitionMatcher:
    matcher = PartitionMatcher(RULE, ("x",))
    for t, k in [(1_000, "a"), (2_000, "b"), (3_000, "b")]:
        matcher.add_text(orjson.dumps({"u": "x", "k": k}).decode(), t, t)
    matcher.add_text(orjson.dumps({"u": "x", "k": "c"}).decode(), 9_000, 9_000)  # waits for the watermark
    assert matcher.advance(5_000) == [] and matcher.start == 0  # the attempt from the row at 1,000 pends
    return matcher


def test_a_matcher_that_reads_no_row_leaves_them_unparsed_and_writes_them_back_as_they_came():
    numbers, lines = stored(pending())
    matcher = loaded(numbers, lines)
    assert matcher.advance(6_000) == []  # nothing released, the limit (61,000) far
    assert matcher.rows is None and matcher.next_deadline() == 9_000 and not matcher.idle
    assert stored(matcher) == (numbers[:1] + [6_000] + numbers[2:], lines)
    assert loaded(numbers, lines).to_state()["rows"] == [{"u": "x", "k": k} for k in "abb"]


def test_a_matcher_read_back_matches_as_the_one_never_written():
    numbers, lines = stored(pending())
    once, kept = loaded(numbers, lines), pending()
    found = [(m.start_ms, m.end_ms, m.rows) for m in once.advance(10_000)]
    assert found == [(m.start_ms, m.end_ms, m.rows) for m in kept.advance(10_000)] == [(1_000, 9_000, 4)]
    assert once.rows == kept.rows
