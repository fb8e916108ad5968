"""Complex event processing and stored queries on Spark: the thin part. The semantics live in
``freshet.cep`` (pure Python, unit-tested); here they are wired into a streaming query.

Rules: each record of the input (JSON) is routed to every rule whose FROM and WHERE it passes, with the
rule's event time and partition key; the events of one input chunk going to one (rule, bucket of partition
keys) travel as one *pack* row (``pack``), stamped with their newest event time, so Spark shuffles, sorts
and converts a few rows per chunk instead of one per event and rule; behind a watermark, Python stateful
processing per (rule, bucket) (``applyInPandasWithState``, state in RocksDB and the checkpoint, event-time
timeouts) feeds a :class:`~freshet.cep.matcher.PartitionMatcher` per key, which matches rows in event-time
order once the watermark passes them and emits each match once. Late events are dropped: a pack whose
newest event is behind the watermark by Spark (and counted in the query's progress), the late events of
a pack that has newer ones by the step.

Stored queries: each record is matched against the query index (``freshet.cep.search``); one output
row per (record, query) it matches. Stateless.

Where the definitions come from is a :class:`RuleSource`: a fixed list (tests, files) or a compacted topic
(``freshet rules add``, ``freshet watch add``) re-read at most once a second in every Python worker, so a
running query picks up added and removed definitions without a restart.
"""

from __future__ import annotations

import json
import re
import time
import zlib
from collections.abc import Iterator

import numpy as np
import orjson
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from freshet.cep.matcher import CompiledRule, PartitionMatcher, RuleRouter, event_time_ms
from freshet.cep.rules import parse_rule
from freshet.cep.search import QueryIndex

from .stateful import DEFAULT_LATENESS, _FreshState

MATCH_OUTPUT = ("rule string, kind string, key string, match_start timestamp, match_end timestamp, rows int, "
                "measures string")
# a pack: the events of one input chunk for one (rule, bucket), its newest event time, and line by line (JSON
# texts hold no line break) each event's partition key and projected fields; their times and orders as JSON arrays
ROUTED = "rule string, bucket int, event_time timestamp, pkeys string, times string, ords string, events string"
BUCKETS = 16  # state groups per rule (see _match_step)
WATCH_OUTPUT = "topic string, partition int, offset long, query_ids array<string>, event string"
REFRESH_S = 1.0
STEP_CONF = "spark.freshet.cep.step"  # the stateful operator, one of STEPS
STEPS = ("applyInPandasWithState", "transformWithState")


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


def pack(entries: list[tuple[str, int, int, str]]) -> tuple[int, str, str, str, str]:
    """A pack row's columns from its events' ``(pkey, time, order, event text)``: the newest time, then the
    partition keys and event texts one a line, the times and orders as JSON arrays."""
    pkeys, times, orders, events = zip(*entries)
    return (max(times), "\n".join(pkeys), orjson.dumps(times).decode(), orjson.dumps(orders).decode(),
            "\n".join(events))


def unpack(pkeys: str, times: str, orders: str, events: str) -> Iterator[tuple[str, int, int, str]]:
    """The ``(pkey, time, order, event text)`` of a pack's events, as ``pack`` took them."""
    return zip(pkeys.split("\n"), orjson.loads(times), orjson.loads(orders), events.split("\n"))


def route(raw: DataFrame, rules: RuleSource) -> DataFrame:
    """Per chunk of input, one pack row (``ROUTED``) per (rule, state bucket) its events go to: the rule, the
    bucket, the pack's newest event time, each event's partition key (JSON), event time, order (partition,
    offset) and the fields the rule reads (JSON); and one heartbeat row (rule "") with the newest event time of
    the chunk, so that events no rule wants move the watermark too."""
    columns = raw.select(F.col("value").cast("string").alias("value"), "topic", "partition", "offset")
    return columns.mapInArrow(_router(rules), ROUTED)


def _router(rules: RuleSource):
    """``route``'s function: Arrow batches of (value, topic, partition, offset) in, ROUTED batches out."""

    def routed(batches):
        import pyarrow as pa

        from .cep_columns import column_routing

        for batch in batches:
            router = _Compiled.router(rules)
            clock = NewestTime(router.rules[0] if router.rules else None)  # the time of the events no rule wants
            needles = router.needles
            # an event whose text holds none of the values the rules' WHERE clauses ask for goes to no rule: it
            # is neither parsed nor even taken out of Arrow (most events, for rules like the intrusion ones);
            # a text with \u escapes may spell a value otherwise, so it is parsed
            chosen = batch if needles is None else batch.take(_holding_any(batch.column(0), needles))
            plan = column_routing(router)
            done = plan.route(chosen, BUCKETS) if plan.wants() else None
            if done is None:  # event by event
                groups, newest = _route_events(router, chosen, clock)
                rows = [(name, bucket, *pack(entries)) for (name, bucket), entries in groups.items()]
            else:
                rows, newest = done
            if needles is not None:
                # the events not parsed tell the time through the newest record of each partition in the chunk
                # (a partition's last record is its latest, up to the stream's disorder): a watermark from
                # them may lag the true newest time by that disorder, never run ahead of it
                for value in batch.take(_newest_of_each_partition(batch)).column(0).to_pylist():
                    event = _parse(value) if value is not None else None
                    if event is not None:
                        clock.see(event)
            seen = clock.newest()
            if seen is not None and (newest is None or seen > newest):
                newest = seen
            if newest is not None:  # one heartbeat row per chunk, in a group no rule has
                rows.append(("", 0, newest, "", "", "", ""))
            columns = list(zip(*rows)) or [()] * 7
            yield pa.RecordBatch.from_pydict({
                "rule": pa.array(columns[0], pa.string()), "bucket": pa.array(columns[1], pa.int32()),
                "event_time": pa.array(columns[2], pa.int64()).cast(pa.timestamp("ms")).cast(
                    pa.timestamp("us", tz="UTC")),
                "pkeys": pa.array(columns[3], pa.string()), "times": pa.array(columns[4], pa.string()),
                "ords": pa.array(columns[5], pa.string()), "events": pa.array(columns[6], pa.string())})
    return routed


def _route_events(router: RuleRouter, chosen, clock: NewestTime) -> tuple[dict, int | None]:
    """The events of an Arrow batch of (value, topic, partition, offset) routed one by one: ``{(rule, bucket):
    [(pkey, time, order, text)]}`` and their newest time (an event no rule wants goes to ``clock``)."""
    groups: dict[tuple[str, int], list] = {}
    keys: dict[tuple, tuple[str, int]] = {}  # (type, value) of a one-field key -> (its JSON text, bucket)
    newest = None
    values, topics = chosen.column(0).to_pylist(), chosen.column(1).to_pylist()
    partitions, offsets = chosen.column(2).to_pylist(), chosen.column(3).to_pylist()
    rules_for = router.rules_for
    for value, topic, partition, offset in zip(values, topics, partitions, offsets):
        event = _parse(value) if value is not None else None
        if event is None:
            continue
        wanted = False
        whole = None  # the event's JSON text, for the rules that read every field it has
        texts = None  # the texts of the event's projections made so far, by the fields projected
        for rule in rules_for(event, topic):
            when = rule.time_of(event)
            if when is None:
                continue
            wanted = True
            key = rule.key_of(event)
            # a key of one text or integer (most): its JSON text and bucket made once a chunk
            one = key[0] if len(key) == 1 else None
            known = keys.get((type(one), one)) if type(one) in (str, int) else None
            if known is None:
                pkey = orjson.dumps(key).decode()
                known = (pkey, zlib.crc32(pkey.encode()) % BUCKETS)
                if type(one) in (str, int):
                    keys[(type(one), one)] = known
            # the fields the rule reads, not the whole event: less to parse again in the stateful
            # step and to keep in its state; made once an event for the rules that read the same
            if event.keys() <= rule.field_set:
                if whole is None:
                    whole = orjson.dumps(event).decode()
                text = whole
            else:
                text = texts.get(rule.fields) if texts is not None else None
                if text is None:
                    text = orjson.dumps(rule.project(event)).decode()
                    if texts is None:
                        texts = {}
                    texts[rule.fields] = text
            entry = (known[0], when, (partition << 40) | offset, text)
            group = (rule.name, known[1])
            entries = groups.get(group)
            if entries is None:
                groups[group] = [entry]
            else:
                entries.append(entry)
            if newest is None or when > newest:
                newest = when
        if not wanted:
            clock.see(event)
    return groups, newest


class NewestTime:
    """The newest event time among events, read through a rule's ORDER BY, cheaply: ISO 8601 texts of one
    shape (same length, same zone) order as their times do, so they are compared as text and only the
    newest is parsed."""

    def __init__(self, rule: CompiledRule | None) -> None:
        self.rule = rule
        self.path = rule.rule.order_by if rule is not None else ()
        self.text: str | None = None
        self.ms: int | None = None

    def see(self, event: dict) -> None:
        if self.rule is None:
            return
        value = event.get(self.path[0]) if len(self.path) == 1 else self.rule.time_of(event)
        if isinstance(value, str):
            # the same shape in UTC (2026-01-01T00:02:23.128Z): text order is time order
            current = self.text
            if value[-1:] == "Z" and (current is None or (len(value) == len(current) and value[10] == current[10])):
                if current is None or value > current:
                    self.text = value
                return
            value = event_time_ms(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = event_time_ms(value)  # None beyond a timestamp's range
            if value is not None and (self.ms is None or value > self.ms):
                self.ms = value

    def newest(self) -> int | None:
        found = [t for t in (self.ms, event_time_ms(self.text) if self.text is not None else None) if t is not None]
        return max(found) if found else None


def _parse(value: str) -> dict | None:
    try:
        event = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None


def _holding_any(values, needles: tuple[str, ...]):
    """Indices of the texts that hold one of ``needles`` or a \\u escape (Arrow compute, no Python per row)."""
    import pyarrow.compute as pc

    # one pass of one regex (needles hold no regex syntax but ".", see SAFE_NEEDLE), not a pass a needle
    mask = pc.match_substring_regex(values, "|".join(["\\\\u", *(re.escape(n) for n in needles)]))
    return pc.indices_nonzero(pc.fill_null(mask, False))


def _newest_of_each_partition(batch):
    """Indices of each (topic, partition)'s highest offset in the batch."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if batch.num_rows == 0:
        return pa.array([], pa.int64())
    topic_codes = pc.dictionary_encode(batch.column(1)).indices.cast(pa.int64())
    keys = pc.add(pc.multiply(topic_codes, 1 << 32), batch.column(2).cast(pa.int64()))
    chosen = []
    for key in pc.unique(keys).to_pylist():
        rows = pc.indices_nonzero(pc.equal(keys, key))
        offsets = pc.take(batch.column(3), rows)
        chosen.append(rows[pc.index(offsets, pc.max(offsets)).as_py()].as_py())
    return pa.array(chosen, pa.int64())


def _events_of(batch) -> Iterator[tuple[dict, str, int, int]]:
    """The JSON objects of an Arrow batch of (value, topic, partition, offset); other values are skipped."""
    for value, topic, partition, offset in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(),
                                               batch.column(2).to_pylist(), batch.column(3).to_pylist()):
        event = _parse(value) if value is not None else None
        if event is not None:
            yield event, topic, partition, offset



COMPACT = "F2\n"  # the state's first line: the compact form (without it, the first form: one JSON object)
COMPACT_PACKS = "F3\n"  # the compact form with the group's waiting packs


class Group:
    """The state of one (rule, bucket) group: a :class:`PartitionMatcher` per partition key that has rows the
    watermark released (pending attempts), and the events the watermark has not passed yet, kept as the packs
    they came in (``waiting``: ``[oldest time, pkeys, times, orders, events]``, the texts of a ROUTED row) and
    split only once the watermark reaches them: an event waits at no cost per batch (as its pack's text, not
    parsed, not given to a matcher, written out as it came), however many batches the lateness spans."""

    __slots__ = ("compiled", "matchers", "waiting")

    def __init__(self, compiled: CompiledRule, matchers: dict[str, PartitionMatcher] | None = None,
                 waiting: list | None = None) -> None:
        self.compiled = compiled
        self.matchers = matchers if matchers is not None else {}
        self.waiting = waiting if waiting is not None else []

    def feed(self, batches: Iterator[pd.DataFrame], floor: int | None) -> None:
        """The packs of a batch (pandas frames of ROUTED rows); an event at or behind ``floor`` (the watermark) is
        late and dropped, as Spark drops a late row."""
        waiting = self.waiting
        for pdf in batches:
            for pkeys, times, orders, events in zip(pdf["pkeys"].tolist(), pdf["times"].tolist(),
                                                    pdf["ords"].tolist(), pdf["events"].tolist()):
                when = orjson.loads(times)
                oldest = min(when)
                if floor is None or oldest > floor:
                    waiting.append([oldest, pkeys, times, orders, events])
                else:
                    kept = [e for e in unpack(pkeys, times, orders, events) if e[1] > floor]
                    if kept:
                        waiting.append([min(e[1] for e in kept), *pack(kept)[1:]])

    def release(self, watermark: int | None, closed: bool) -> None:
        """The waiting events at or behind ``watermark`` (all of them if ``closed``) to their keys' matchers."""
        keep = []
        matchers, compiled = self.matchers, self.compiled
        for entry in self.waiting:
            if not closed and (watermark is None or entry[0] > watermark):
                keep.append(entry)
                continue
            rest = []
            for pkey, when, order, event in unpack(*entry[1:]):
                if closed or when <= watermark:
                    matcher = matchers.get(pkey)
                    if matcher is None:
                        matcher = matchers[pkey] = PartitionMatcher(compiled, tuple(orjson.loads(pkey)))
                    # PartitionMatcher.add_text: never late here (each watermark so far was behind it)
                    matcher.buffer.append((when, order, event))
                else:
                    rest.append((pkey, when, order, event))
            if rest:
                keep.append([min(e[1] for e in rest), *pack(rest)[1:]])
        self.waiting = keep

    def settle(self, watermark: int | None, closed: bool) -> list:
        """Release what the watermark passed and match: the matches it lets out, partition key by key."""
        self.release(watermark, closed)
        found = []
        matchers = self.matchers
        for pkey in sorted(matchers):
            found.extend(matchers[pkey].advance(watermark, closed=closed))
        self.matchers = {pkey: m for pkey, m in matchers.items() if not m.idle}
        return found

    @property
    def idle(self) -> bool:
        return not self.matchers and not self.waiting

    def wake_at(self, watermark: int) -> int | None:
        """The watermark to wake the group at when no event comes: the oldest waiting event's time or a pending
        attempt's time limit, whichever is first."""
        deadlines = [d for d in (m.next_deadline() for m in self.matchers.values()) if d is not None]
        deadlines.extend(entry[0] for entry in self.waiting)
        return max(min(deadlines) - 1, watermark + 1) if deadlines else None

    def dump(self) -> str:
        """``F3``, a JSON line (``m``: each key's numbers, ``PartitionMatcher.to_compact``; ``n``: the length of
        the matchers' lines; ``p``: each waiting pack's oldest time and the lengths of its four texts), the
        matchers' event texts one a line, then the waiting packs' texts end to end, as they came."""
        lines: list[str] = []
        numbers = [[pkey, *m.to_compact(lines)] for pkey, m in self.matchers.items()]
        body = "\n".join(lines)
        packs = [[e[0], len(e[1]), len(e[2]), len(e[3]), len(e[4])] for e in self.waiting]
        header = orjson.dumps({"m": numbers, "n": len(body), "p": packs}).decode()
        return "".join([COMPACT_PACKS, header, "\n", body, *(t for e in self.waiting for t in e[1:])])

    @classmethod
    def load(cls, compiled: CompiledRule, text: str) -> Group:
        """The group ``dump`` wrote; also reads the earlier forms (``F2``: the matchers with their buffered events,
        and the first form, one JSON object ``{pkey: PartitionMatcher.to_state()}``)."""
        if not text.startswith(COMPACT_PACKS):
            return cls(compiled, load_group(compiled, text))
        end = text.index("\n", len(COMPACT_PACKS))
        header = orjson.loads(text[len(COMPACT_PACKS):end])
        at = end + 1
        body = text[at:at + header["n"]]
        lines = body.split("\n") if body else []
        matchers, line = {}, 0
        for pkey, *numbers in header["m"]:
            matchers[pkey], line = PartitionMatcher.from_compact(compiled, tuple(orjson.loads(pkey)), numbers, lines,
                                                                 line)
        at += header["n"]
        waiting = []
        for oldest, *lengths in header["p"]:
            entry = [oldest]
            for length in lengths:
                entry.append(text[at:at + length])
                at += length
            waiting.append(entry)
        return cls(compiled, matchers, waiting)


def dump_group(matchers: dict[str, PartitionMatcher]) -> str:
    """The ``F2`` state of one (rule, bucket) group (what checkpoints before ``Group.dump`` hold): ``F2``, a
    JSON line of each partition key's numbers (``PartitionMatcher.to_compact``), then the events' JSON texts, one
    a line (JSON text as ``orjson`` writes it holds no line break)."""
    lines: list[str] = []
    header = [[pkey, *m.to_compact(lines)] for pkey, m in matchers.items()]
    return COMPACT + orjson.dumps(header).decode() + "\n" + "\n".join(lines)


def load_group(compiled: CompiledRule, text: str) -> dict[str, PartitionMatcher]:
    """The matchers of a group's state in any form, each with its waiting events buffered: ``F3``
    (``Group.dump``), ``F2`` (``dump_group``) or the first form (``{pkey: PartitionMatcher.to_state()}`` as one
    JSON object)."""
    if text.startswith(COMPACT_PACKS):
        group = Group.load(compiled, text)
        group.release(None, closed=True)
        return group.matchers
    if not text.startswith(COMPACT):
        return {pkey: PartitionMatcher.from_state(compiled, tuple(orjson.loads(pkey)), s)
                for pkey, s in orjson.loads(text).items()}
    lines = text.split("\n")
    matchers = {}
    at = 2
    for pkey, *numbers in orjson.loads(lines[1]):
        matchers[pkey], at = PartitionMatcher.from_compact(compiled, tuple(orjson.loads(pkey)), numbers, lines, at)
    return matchers


def _match_step(rules: RuleSource):
    """The stateful step of one (rule, bucket) group: the matchers of every partition key of that bucket and
    their waiting events, kept together in one state value (``Group.dump``). A Python call per group costs
    about a millisecond here, so keys are spread over a few buckets instead of each being a group of its own."""

    def step(group: tuple, batches: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        rule_name = group[0]
        compiled = _Compiled.rules(rules).get(rule_name) if rule_name else None
        if compiled is None:  # a heartbeat, or the rule was removed: its partial matches go with it
            if state.exists:
                state.remove()
            return
        current = Group.load(compiled, state.get[0]) if state.exists else Group(compiled)
        streaming = not isinstance(state, _FreshState)
        watermark = state.getCurrentWatermarkMs() if streaming else None
        # an event at or behind the watermark is late (as Spark drops a row): Spark drops the packs whose newest
        # event is, the step the late events of the others
        current.feed(batches, watermark if streaming else None)
        found = current.settle(watermark, not streaming)
        if streaming:
            if current.idle:
                if state.exists:
                    state.remove()
            else:
                state.update((current.dump(),))
                wake = current.wake_at(watermark)
                if wake is not None:
                    state.setTimeoutTimestamp(wake)
        if found:
            yield _matches_frame(found)
    return step


def _processor_class():
    """The stateful step as a ``transformWithStateInPandas`` processor (defined on first use: PySpark's
    streaming state API is imported only where a stream runs)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class MatchProcessor(StatefulProcessor):
        """The step of one (rule, bucket) group on ``transformWithStateInPandas``: the group (``Group.dump``'s
        text) and the event-time timer set for it in one value state, one timer a group to wake it when a
        waiting event or a pending attempt's time limit comes due without new events."""

        def __init__(self, rules: RuleSource) -> None:
            self.rules = rules

        def init(self, handle) -> None:
            self.handle = handle
            self.state = handle.getValueState("matchers", "text string, timer long")

        def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
            return self._run(key[0], rows, timerValues.getCurrentWatermarkInMs())

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
            return self._run(key[0], iter(()), timerValues.getCurrentWatermarkInMs(),
                             expiredTimerInfo.getExpiryTimeInMs())

        def _run(self, rule_name: str, batches, watermark: int, fired: int | None = None):
            watermark = max(watermark, 0)  # before the first watermark (-1 here, 0 for applyInPandasWithState)
            compiled = _Compiled.rules(self.rules).get(rule_name) if rule_name else None
            stored = self.state.get() if compiled is not None or rule_name else None
            timer = stored[1] if stored is not None else None
            if compiled is None:  # a heartbeat, or the rule was removed: its partial matches go with it
                if stored is not None:
                    self.state.clear()
                    if timer is not None and timer != fired:
                        self.handle.deleteTimer(timer)
                return
            current = Group.load(compiled, stored[0]) if stored is not None else Group(compiled)
            current.feed(batches, watermark)
            found = current.settle(watermark, False)
            wake = current.wake_at(watermark)
            if wake != timer:
                if timer is not None and timer != fired:  # a fired timer is deleted after this call
                    self.handle.deleteTimer(timer)
                if wake is not None:
                    self.handle.registerTimer(wake)
            if not current.idle:
                self.state.update((current.dump(), wake))
            elif stored is not None:
                self.state.clear()
            if found:
                yield _matches_frame(found)

        def close(self) -> None:
            pass

    return MatchProcessor


def _matches_frame(found: list) -> pd.DataFrame:
    """The matches' alert records (``Match.alert``, the shape ``freshet rules try`` prints) as MATCH_OUTPUT
    rows: ``key`` and ``measures`` as JSON text until ``match_rules`` makes them JSON values again. Built column
    by column (no alert dict, no ISO text per match): a step's pandas work is a good part of its cost."""
    keys: dict = {}  # a key's JSON text, made once a frame (a key of texts and integers, most keys)
    key_texts = []
    for m in found:
        key = m.key
        plain = all(type(v) in (str, int) for v in key)
        text = keys.get(key) if plain else None
        if text is None:
            text = _json_text(m.key_object())
            if plain:
                keys[key] = text
        key_texts.append(text)

    def times(ms: list[int]):  # the instants the alert's ISO texts name (iso_utc), not parsed back
        return pd.array(np.array(ms, dtype="int64").astype("datetime64[ms]"), dtype=_UTC_MS)

    # from arrays, not Series: a frame of Series aligns their indexes (0.47 ms a frame here, 0.11 from arrays, most
    # of it whatever the matches; a microbatch makes one a group with matches, 128 for 8 rules)
    return pd.DataFrame({
        "rule": _objects([m.rule for m in found]), "kind": _objects([m.kind for m in found]),
        "key": _objects(key_texts),
        "match_start": times([m.start_ms for m in found]), "match_end": times([m.end_ms for m in found]),
        "rows": np.array([m.rows for m in found], dtype="int32"),
        "measures": _objects([_json_text(m.measures_object()) for m in found])}, copy=False)


_UTC_MS = pd.DatetimeTZDtype("ms", "UTC")


def _objects(values: list) -> np.ndarray:
    """A numpy array of objects holding ``values`` as they are (``np.array`` of equal-length tuples would nest)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _json_text(value) -> str:
    """JSON text of a key or measures object (``match_rules`` parses it into a VARIANT: only its values count)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # an integer beyond 64 bits (a SUM), which orjson does not write
        return json.dumps(value)


def alert_columns(matches: DataFrame) -> DataFrame:
    """MATCH_OUTPUT rows as the alert records' columns: ``key`` and ``measures`` parsed into JSON values
    (Spark's VARIANT), so a topic record (``to_json`` of the row) holds them as objects, not as text."""
    return matches.select("rule", "kind", F.parse_json("key").alias("key"), "match_start", "match_end", "rows",
                          F.parse_json("measures").alias("measures"))


def match_rules(raw: DataFrame, rules: RuleSource, lateness: str = DEFAULT_LATENESS,
                stateful: str = "applyInPandasWithState") -> DataFrame:
    """Every match (and, for rules that ask, every timed-out partial match) of the rules over the raw
    records of the freshet source, as alert records: ``rule, kind, key, match_start, match_end, rows,
    measures`` (``key`` and ``measures`` JSON values, VARIANT; see ``Match.alert``).

    Streaming: each match once, when the watermark (``lateness`` behind the newest event) has passed
    its rows and the rule's time limit allows no other outcome. Static: the matches of the whole input."""
    routed = route(raw, rules)
    step = _match_step(rules)
    stateful = raw.sparkSession.conf.get(STEP_CONF, stateful)
    routed = routed.where(routed.rule != "") if not routed.isStreaming else routed  # heartbeats: streams only
    if routed.isStreaming:
        from pyspark.sql.streaming.state import GroupStateTimeout

        grouped = routed.withWatermark("event_time", lateness).groupBy("rule", "bucket")
        if stateful == "transformWithState":
            return alert_columns(grouped.transformWithStateInPandas(_processor_class()(rules), MATCH_OUTPUT,
                                                                    "Append", "EventTime"))
        return alert_columns(grouped.applyInPandasWithState(step, MATCH_OUTPUT, "matcher string", "append",
                                                            GroupStateTimeout.EventTimeTimeout))

    def once(key: tuple, pdf: pd.DataFrame) -> pd.DataFrame:
        frames = list(step(key, iter([pdf]), _FreshState()))
        return pd.concat(frames) if frames else _matches_frame([])

    return alert_columns(routed.groupBy("rule", "bucket").applyInPandas(once, MATCH_OUTPUT))


def match_queries(raw: DataFrame, queries: RuleSource) -> DataFrame:
    """One row per record that matches stored queries: ``topic, partition, offset, query_ids`` (sorted),
    ``event`` (as an Elasticsearch percolator answers: per document, the queries it matches; the event is
    written once however many queries it matches)."""

    def matched(batches):
        import pyarrow as pa

        for batch in batches:
            index = _Compiled.queries(queries)
            out: dict[str, list] = {"topic": [], "partition": [], "offset": [], "query_ids": [], "event": []}
            for event, topic, partition, offset in _events_of(batch):
                hits = index.match(event)
                if hits:
                    out["topic"].append(topic)
                    out["partition"].append(partition)
                    out["offset"].append(offset)
                    out["query_ids"].append(hits)
                    out["event"].append(orjson.dumps(event).decode())
            yield pa.RecordBatch.from_pydict({
                "topic": pa.array(out["topic"], pa.string()), "partition": pa.array(out["partition"], pa.int32()),
                "offset": pa.array(out["offset"], pa.int64()),
                "query_ids": pa.array(out["query_ids"], pa.list_(pa.string())),
                "event": pa.array(out["event"], pa.string())})

    columns = raw.select(F.col("value").cast("string").alias("value"), "topic", "partition", "offset")
    return columns.mapInArrow(matched, WATCH_OUTPUT)
