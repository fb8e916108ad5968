"""Review of issue 50's matcher work (session 22): the matcher with its shortcuts (the window scan of ``S*? T``,
start rows skipped, one-row FIRST/LAST, bulk advance, compiled per-instruction tests) on random rules of the rule
language and random event streams (``differential.py``: quantifiers greedy and reluctant, every AFTER MATCH SKIP,
WITHIN with rows exactly at the bound, NOT FOLLOWED BY, EMIT TIMEOUTS, WHERE, PARTITION BY, counts, sums,
FIRST/LAST measures; few keys, ties in time, repeated events, missing fields), against the brute-force reference,
and streamed (random batches, out of order within the lateness, state dumped and loaded between batches) against
the whole. The same generator, run against the tree before the work (``python -m tests.unit.cep.differential
--base ...``), found no difference in about 25,000 cases (each run whole and streamed three ways), 60437f9
against f8d5adb."""

from __future__ import annotations

import random

import orjson
import pytest

from freshet.cep.matcher import CompiledRule, match_events
from freshet.cep.rules import parse_rule

from . import differential
from .reference import reference_matches


def _reference(rule, events: list[dict]) -> list:
    """The reference's matches as (key, first row's time, labels, measures) (``events`` already past WHERE)."""
    partitions: dict = {}
    for seq, event in enumerate(events):
        partitions.setdefault(tuple(event.get(p[0]) for p in rule.partition_by), []).append((event["event_time"], seq,
                                                                                              event))
    out = []
    for key, start, labels, measures in reference_matches(rule, events):
        rows = sorted(partitions[key], key=lambda e: e[:2])
        out.append((key, rows[start][0], labels, measures or {"rows": len(labels)}))
    return out


def _sorted(items: list) -> list:
    return sorted(items, key=lambda m: orjson.dumps(m, option=orjson.OPT_NON_STR_KEYS, default=repr))


@pytest.mark.parametrize("block", range(4))
def test_random_rules_against_the_reference(block):
    """Whole sequences, every match (kind "match") as the reference finds it: its partition, first row, labels and
    measures."""
    checked = 0
    for seed in range(block * 250, block * 250 + 250):
        rng = random.Random(seed)
        text = differential.random_rule(rng)
        events = differential.random_events(rng, 10)
        pattern = text.split("PATTERN (", 1)[1].split(" DEFINE ", 1)[0]
        if sum(pattern.count(c) for c in "*+?{") > 6:
            continue  # the reference lists every labelling: nested ambiguous repeats take it seconds
        rule = parse_rule(text)
        if rule.where is not None:  # the reference filters with WHERE too; keep the partitions it sees
            events = [e for e in events if CompiledRule(rule).accepts(e)]
        ours = [(m.key, m.start_ms, m.labels, m.measures) for m in match_events(rule, events) if m.kind == "match"]
        assert _sorted(ours) == _sorted(_reference(rule, events)), (seed, text, events)
        checked += bool(ours)
    assert checked >= 30  # the cases do match something


def test_random_rules_streamed_as_the_whole():
    """Events in random batches, out of order within the lateness, each key's state dumped and loaded (both forms)
    between batches, given as objects, as text or into the buffer as Group.release does; the stream closed at the
    end: the alerts are the whole sequence's."""
    compared = 0
    for seed in range(300):
        text, events, scripts = differential.case(seed, 12)
        whole = differential.run_whole(differential.current(), text, events)
        for script in scripts:
            if not script["steps"][-1][1]:
                continue  # not closed: attempts may still wait
            streamed = differential.run_stream(differential.current(), text, events, script)
            if streamed[-1] != ("late", 0):
                continue  # a late event was dropped: not the whole sequence
            assert sorted(streamed[:-1]) == sorted(whole), (seed, text, events, script)
            compared += 1
    assert compared > 300
