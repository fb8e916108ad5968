"""The stateful step on either of Spark's Python state operators (``spark.freshet.cep.step``):
``transformWithStateInPandas`` (a value state and event-time timers) gives the alerts ``applyInPandasWithState``
(a GroupState and its event-time timeout) gives, batch by batch, and leaves no state or timer behind; and a
matcher that gets no new row does not run its pending attempt again until its time limit can decide it."""

from __future__ import annotations

import pytest

from freshet.cep.matcher import CompiledRule, PartitionMatcher
from freshet.cep.rules import parse_rule
from freshet.pipelines.cep import FixedRules, _match_step, _processor_class

from .test_alerts import TAKEOVER, UNPAID, StreamState, routed, rules_try, topic_records

MINUTE = 60_000


class ValueState:
    def __init__(self) -> None:
        self.value = None

    def get(self):
        return self.value

    def update(self, value) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


class Handle:
    """``StatefulProcessorHandle`` for one grouping key: its value states and its event-time timers."""

    def __init__(self) -> None:
        self.states: dict[str, ValueState] = {}
        self.timers: set[int] = set()

    def getValueState(self, name: str, schema: str) -> ValueState:
        return self.states.setdefault(name, ValueState())

    def registerTimer(self, ms: int) -> None:
        self.timers.add(ms)

    def deleteTimer(self, ms: int) -> None:
        assert ms in self.timers, "a timer deleted that was not set"
        self.timers.discard(ms)


class Timer:
    def __init__(self, watermark: int, expiry: int | None = None) -> None:
        self.watermark, self.expiry = watermark, expiry

    def getCurrentWatermarkInMs(self) -> int:
        return self.watermark

    def getExpiryTimeInMs(self) -> int:
        return self.expiry


def pandas_state_run(text: str, batches: list[tuple[int, list[dict]]]) -> tuple[list[dict], StreamState]:
    """As ``applyInPandasWithState`` calls the step: with a batch's rows, or when the watermark passed the
    group's timeout."""
    name = parse_rule(text).name
    step, state, out = _match_step(FixedRules({name: text})), StreamState(), []
    for watermark, events in batches:
        state.watermark = watermark
        if events:
            out += topic_records(step((name, 0), iter([routed(text, events)]), state))
        elif state.timeout is not None and watermark > state.timeout:
            out += topic_records(step((name, 0), iter([]), state))
    return out, state


def transform_with_state_run(text: str, batches: list[tuple[int, list[dict]]]) -> tuple[list[dict], Handle]:
    """As ``transformWithStateInPandas`` calls the processor: ``handleInputRows`` with a batch's rows, then
    ``handleExpiredTimer`` for each timer at or behind the watermark, which is deleted after the call
    (PySpark's ``_handle_expired_timers``)."""
    name = parse_rule(text).name
    processor, handle, out = _processor_class()(FixedRules({name: text})), Handle(), []
    processor.init(handle)
    for watermark, events in batches:
        if events:
            out += topic_records(processor.handleInputRows((name, 0), iter([routed(text, events)]), Timer(watermark)))
        for expiry in sorted(t for t in handle.timers if t <= watermark):
            out += topic_records(processor.handleExpiredTimer((name, 0), Timer(watermark), Timer(watermark, expiry)))
            handle.timers.discard(expiry)
    return out, handle


def _events(t0: int) -> list[dict]:
    rows = [("ann", "failed"), ("bob", "failed"), ("ann", "failed"), ("bob", "failed"), ("ann", "ok"),
            ("cid", "failed"), ("ann", "changed"), ("bob", "ok"), ("cid", "failed"), ("bob", "changed")]
    return [{"user": u, "device": {"os": "ios"}, "kind": k, "ip": f"10.0.0.{i}", "score": i, "note": "n",
             "city": "Delft", "event_time": t0 + i * 2 * MINUTE} for i, (u, k) in enumerate(rows)]


@pytest.mark.parametrize("text", [TAKEOVER, UNPAID], ids=["within", "not-followed-by"])
def test_transform_with_state_alerts_as_apply_in_pandas_with_state(tmp_path, text):
    t0 = 1_767_225_600_000
    if text is UNPAID:
        events = [{"order_id": f"o{i % 3}", "kind": "placed" if i < 3 or i % 4 == 0 else "paid",
                   "event_time": t0 + i * 11 * MINUTE} for i in range(10)]
    else:
        events = _events(t0)
    # batches of three events, the watermark 3 minutes behind the newest, then batches without rows that
    # move it on (other groups' events) until every time limit has passed
    batches, newest = [], None
    for i in range(0, len(events), 3):
        chunk = events[i:i + 3]
        batches.append((newest - 3 * MINUTE if newest is not None else -1, chunk))
        newest = max(e["event_time"] for e in chunk)
    batches += [(newest + k * 15 * MINUTE, []) for k in range(6)]

    expected, state = pandas_state_run(text, batches)
    got, handle = transform_with_state_run(text, batches)
    assert got == expected  # the same alerts in the same batches
    by_start = lambda a: (a["match_start"], a["key"]["user" if text is TAKEOVER else "order_id"])  # noqa: E731
    assert sorted(got, key=by_start) == sorted(rules_try(tmp_path, text, events), key=by_start)
    assert len(got) >= 2
    assert not state.exists
    assert handle.states["matchers"].value is None and handle.timers == set()


def test_a_removed_rule_clears_the_group_and_its_timer():
    t0 = 1_767_225_600_000
    name = parse_rule(TAKEOVER).name
    handle = Handle()
    processor = _processor_class()(FixedRules({name: TAKEOVER}))
    processor.init(handle)
    list(processor.handleInputRows((name, 0), iter([routed(TAKEOVER, _events(t0)[:3])]), Timer(-1)))
    list(processor.handleInputRows((name, 0), iter([]), Timer(t0 + 15 * MINUTE)))
    assert handle.states["matchers"].value is not None and len(handle.timers) == 1
    processor.rules = FixedRules({"other": "RULE other PATTERN (A)"})
    assert list(processor.handleInputRows((name, 0), iter([]), Timer(t0 + 16 * MINUTE))) == []
    assert handle.states["matchers"].value is None and handle.timers == set()


def test_no_new_row_no_attempt_until_the_time_limit_can_decide_it():
    """A pending attempt is run again only when rows are released or the horizon reaches its time limit
    (each batch of a stream advances every matcher of a group, most of them with nothing new)."""
    compiled = CompiledRule(parse_rule("RULE r PARTITION BY u PATTERN (A B) DEFINE A AS k = 'a', B AS k = 'b' "
                                       "WITHIN 1 MINUTE"))
    attempts = []
    attempt = compiled.attempt
    compiled.attempt = lambda *args: attempts.append(args[2]) or attempt(*args)
    matcher = PartitionMatcher(compiled, ("x",))
    matcher.add({"u": "x", "k": "a"}, 1_000, 0)
    assert matcher.advance(2_000) == [] and len(attempts) == 1  # released: the attempt is pending
    for watermark in (5_000, 30_000, 60_998):  # nothing new, the limit (61,000) not reached by the horizon
        assert matcher.advance(watermark) == []
    assert len(attempts) == 1
    found = matcher.advance(60_999)  # horizon 61,000: no row can come within the limit, no match
    assert found == [] and len(attempts) == 2 and matcher.idle
