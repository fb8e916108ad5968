"""Complex event processing and stored queries on Spark: the thin part. The semantics live in
``freshet.cep`` (pure Python, unit-tested); here they are wired into a streaming query.

Rules: each record of the input (JSON) is routed to every rule whose FROM and WHERE it passes, as one
row per (rule, partition key), stamped with the rule's event time; behind a watermark, Python stateful
processing per (rule, key) (``applyInPandasWithState``, state in RocksDB and the checkpoint, event-time
timeouts) feeds a :class:`~freshet.cep.matcher.PartitionMatcher`, which matches rows in event-time
order once the watermark passes them and emits each match once. Late rows are dropped by Spark's
watermark (and counted in the query's progress).

Stored queries: each record is matched against the query index (``freshet.cep.search``); one output
row per (record, query) it matches. Stateless.

Where the definitions come from is a :class:`RuleSource`: a fixed list (tests, files) or a compacted topic
(``freshet rules add``, ``freshet watch add``) re-read at most once a second in every Python worker, so a
running query picks up added and removed definitions without a restart.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import orjson
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from freshet.cep.matcher import CompiledRule, PartitionMatcher, RuleRouter
from freshet.cep.rules import parse_rule
from freshet.cep.search import QueryIndex

from .stateful import DEFAULT_LATENESS, _FreshState, epoch_ms

MATCH_OUTPUT = ("rule string, kind string, key string, match_start timestamp, match_end timestamp, rows int, "
                "measures string")
ROUTED = "rule string, pkey string, event_time timestamp, ord long, event string"
WATCH_OUTPUT = "query_id string, query string, topic string, partition int, offset long, event string"
REFRESH_S = 1.0


class RuleSource:
    """Where rule (or query) definitions come from: ``current()`` is ``{name: text}``."""

    def current(self) -> dict[str, str]:
        raise NotImplementedError

    def cache_key(self) -> tuple:
        raise NotImplementedError


class FixedRules(RuleSource):
    def __init__(self, texts: dict[str, str] | list[str]) -> None:
        if isinstance(texts, dict):
            self.texts = dict(texts)
        else:
            self.texts = {parse_rule(t).name: t for t in texts}

    def current(self) -> dict[str, str]:
        return self.texts

    def cache_key(self) -> tuple:
        return ("fixed", tuple(sorted(self.texts.items())))


class TopicRules(RuleSource):
    """Definitions in a compacted topic; each worker process keeps one reader, refreshed once a second."""

    _readers: dict = {}

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic

    def current(self) -> dict[str, str]:
        from freshet.client.stored import StoredDefinitions

        key = (self.bootstrap, self.topic)
        stored = TopicRules._readers.get(key)
        if stored is None:
            stored = TopicRules._readers[key] = StoredDefinitions(self.bootstrap, self.topic)
        if stored.refreshed_at == 0.0 or time.monotonic() - stored.refreshed_at >= REFRESH_S:
            stored.refresh()
        return {name: d["text"] for name, d in stored.definitions.items()}

    def cache_key(self) -> tuple:
        return ("topic", self.bootstrap, self.topic)


class _Compiled:
    """The compiled form of a source's current definitions, rebuilt only when a text changes."""

    _cache: dict = {}

    @staticmethod
    def rules(source: RuleSource) -> dict[str, CompiledRule]:
        texts = source.current()
        cached = _Compiled._cache.get(source.cache_key())
        if cached is not None and cached[0] == texts:
            return cached[1]
        compiled = {}
        for name, text in texts.items():
            try:
                compiled[name] = CompiledRule(parse_rule(text))
            except ValueError:
                continue  # `freshet rules add` refuses bad rules; one written by hand is skipped
        _Compiled._cache[source.cache_key()] = (dict(texts), compiled)
        return compiled

    @staticmethod
    def router(source: RuleSource) -> RuleRouter:
        compiled = _Compiled.rules(source)
        cached = _Compiled._cache.get(("router", source.cache_key()))
        if cached is not None and cached[0] is compiled:
            return cached[1]
        router = RuleRouter(list(compiled.values()))
        _Compiled._cache[("router", source.cache_key())] = (compiled, router)
        return router

    @staticmethod
    def queries(source: RuleSource) -> QueryIndex:
        texts = source.current()
        cached = _Compiled._cache.get(("q", source.cache_key()))
        if cached is not None and cached[0] == texts:
            return cached[1]
        index = QueryIndex()
        for name, text in texts.items():
            try:
                index.add(name, text)
            except ValueError:
                continue
        _Compiled._cache[("q", source.cache_key())] = (dict(texts), index)
        return index


def _events(pdf: pd.DataFrame) -> Iterator[tuple[dict, str, int, int]]:
    for value, topic, partition, offset in zip(pdf["value"], pdf["topic"], pdf["partition"].tolist(),
                                               pdf["offset"].tolist()):
        if value is None:
            continue
        try:
            event = orjson.loads(value)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict):
            yield event, topic, int(partition), int(offset)


def route(raw: DataFrame, rules: RuleSource) -> DataFrame:
    """One row per (event, rule it passes): the rule, the partition key (JSON), event time, order, event."""

    def routed(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            router = _Compiled.router(rules)
            out: dict[str, list] = {"rule": [], "pkey": [], "event_time": [], "ord": [], "event": []}
            newest = None  # the chunk's newest event time: the watermark moves with every event, routed or not
            clock = router.rules[0] if router.rules else None  # whose ORDER BY reads the time of the rest
            for event, topic, partition, offset in _events(pdf):
                text = None
                for rule in router.rules_for(event, topic):
                    when = rule.time_of(event)
                    if when is None:
                        continue
                    if text is None:
                        text = orjson.dumps(event).decode()
                    out["rule"].append(rule.name)
                    out["pkey"].append(orjson.dumps(rule.key_of(event)).decode())
                    out["event_time"].append(when)
                    out["ord"].append((partition << 40) | offset)
                    out["event"].append(text)
                    if newest is None or when > newest:
                        newest = when
                if text is None and clock is not None:  # an event no rule wants still tells the time
                    when = clock.time_of(event)
                    if when is not None and (newest is None or when > newest):
                        newest = when
            if newest is not None:  # one heartbeat row per chunk, in a group no rule has
                for column, value in (("rule", ""), ("pkey", ""), ("event_time", newest), ("ord", 0), ("event", "")):
                    out[column].append(value)
            yield pd.DataFrame({
                "rule": pd.Series(out["rule"], dtype=object), "pkey": pd.Series(out["pkey"], dtype=object),
                "event_time": pd.to_datetime(pd.Series(out["event_time"], dtype="int64"), unit="ms", utc=True),
                "ord": pd.Series(out["ord"], dtype="int64"), "event": pd.Series(out["event"], dtype=object)})

    columns = raw.select(F.col("value").cast("string").alias("value"), "topic", "partition", "offset")
    return columns.mapInPandas(routed, ROUTED)


def _match_step(rules: RuleSource):
    def step(group: tuple, batches: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        rule_name, pkey = group
        compiled = _Compiled.rules(rules).get(rule_name) if rule_name else None
        if compiled is None:  # the rule was removed: its partial matches go with it
            if state.exists:
                state.remove()
            return
        key = tuple(json.loads(pkey))
        matcher = (PartitionMatcher.from_state(compiled, key, json.loads(state.get[0])) if state.exists
                   else PartitionMatcher(compiled, key))
        for pdf in batches:
            times = epoch_ms(pdf["event_time"])
            for event, when, order in zip(pdf["event"], times.tolist(), pdf["ord"].tolist()):
                matcher.add(orjson.loads(event), when, order)
        streaming = not isinstance(state, _FreshState)
        if streaming:
            found = matcher.advance(state.getCurrentWatermarkMs())
        else:
            found = matcher.advance(None, closed=True)
        if streaming:
            if matcher.idle:
                state.remove()
            else:
                state.update((json.dumps(matcher.to_state()),))
                deadline = matcher.next_deadline()
                if deadline is not None:
                    state.setTimeoutTimestamp(max(deadline - 1, state.getCurrentWatermarkMs() + 1))
        if found:
            yield _matches_frame(found)
    return step


def _matches_frame(found: list) -> pd.DataFrame:
    return pd.DataFrame({
        "rule": pd.Series([m.rule for m in found], dtype=object),
        "kind": pd.Series([m.kind for m in found], dtype=object),
        "key": pd.Series([json.dumps(list(m.key)) for m in found], dtype=object),
        "match_start": pd.to_datetime(pd.Series([m.start_ms for m in found], dtype="int64"), unit="ms", utc=True),
        "match_end": pd.to_datetime(pd.Series([m.end_ms for m in found], dtype="int64"), unit="ms", utc=True),
        "rows": pd.Series([m.rows for m in found], dtype="int32"),
        "measures": pd.Series([json.dumps(m.measures, default=str) for m in found], dtype=object)})


def match_rules(raw: DataFrame, rules: RuleSource, lateness: str = DEFAULT_LATENESS) -> DataFrame:
    """Every match (and, for rules that ask, every timed-out partial match) of the rules over the raw
    records of the freshet source: ``rule, kind, key, match_start, match_end, rows, measures`` (JSON).

    Streaming: each match once, when the watermark (``lateness`` behind the newest event) has passed
    its rows and the rule's time limit allows no other outcome. Static: the matches of the whole input."""
    routed = route(raw, rules)
    step = _match_step(rules)
    if routed.isStreaming:
        from pyspark.sql.streaming.state import GroupStateTimeout

        return (routed.withWatermark("event_time", lateness).groupBy("rule", "pkey")
                .applyInPandasWithState(step, MATCH_OUTPUT, "matcher string", "append",
                                        GroupStateTimeout.EventTimeTimeout))

    def once(key: tuple, pdf: pd.DataFrame) -> pd.DataFrame:
        frames = list(step(key, iter([pdf]), _FreshState()))
        return pd.concat(frames) if frames else _matches_frame([])

    return routed.groupBy("rule", "pkey").applyInPandas(once, MATCH_OUTPUT)


def match_queries(raw: DataFrame, queries: RuleSource) -> DataFrame:
    """One row per (record, stored query it matches): ``query_id, query, topic, partition, offset, event``."""

    def matched(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            index = _Compiled.queries(queries)
            out: dict[str, list] = {c.split()[0]: [] for c in WATCH_OUTPUT.split(", ")}
            for event, topic, partition, offset in _events(pdf):
                hits = index.match(event)
                if not hits:
                    continue
                text = json.dumps(event)
                for query_id in hits:
                    out["query_id"].append(query_id)
                    out["query"].append(index.queries[query_id].text)
                    out["topic"].append(topic)
                    out["partition"].append(partition)
                    out["offset"].append(offset)
                    out["event"].append(text)
            yield pd.DataFrame({name: pd.Series(values, dtype={"partition": "int32", "offset": "int64"}.get(name, object))
                                for name, values in out.items()})

    columns = raw.select(F.col("value").cast("string").alias("value"), "topic", "partition", "offset")
    return columns.mapInPandas(matched, WATCH_OUTPUT)
