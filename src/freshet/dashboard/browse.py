"""Finding records in a topic as a Kafka client: a scan over offset ranges, read forward or backward in chunks,
filtered in the server (key, value substring, header, JSON path) within a budget of records scanned, each match
rendered for the page (JSON, text or bytes) with its transaction state.

Transaction state, the method: the scan reads with ``isolation.level=read_uncommitted`` (it sees every data
record, aborted ones included; librdkafka drops the control records). For each record shown, a second consumer
with ``read_committed`` decides: below the partition's last stable offset (LSO, which a read_committed
``get_watermark_offsets`` answers) every record is decided, and a read_committed fetch from its offset returns
it unless it was aborted (the broker sends the aborted transactions of the range, the client skips their
records): returned -> committed or not transactional, skipped -> ``aborted``. At or past the LSO nothing is
decided yet: ``open`` (the open transaction's own record, or one written after it began, which read_committed
readers do not see until that transaction ends). librdkafka does not hand Python a batch's producer id or
transactional bit, so the two cannot be told apart past the LSO.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from dataclasses import dataclass, field

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from freshet.client import consumer_config
from freshet.client.offsets import watermark_offsets

from . import json_paths, scan_columns

START_KINDS = ("newest", "oldest", "offset", "timestamp")
FIRST_CHUNK, MAX_CHUNK = 500, 100_000  # records a partition reads per round; it doubles each round
BRIDGE = 50_000  # matches closer than this are checked in one read_committed pass (a seek costs ~as much)
COMPARISON = re.compile(r"^(?P<path>.+?)\s*(?P<op>==|!=|>=|<=|>|<)\s*(?P<literal>[^=<>!]+)$")


class BadRequest(ValueError):
    """A request the scan refuses: the message is shown to the user as it is."""


class ScanTimeout(TimeoutError):
    """The cluster did not deliver a range it has (the message says which)."""


class Cancelled(Exception):
    """The scan was told to stop (its reader went away)."""


@dataclass
class Filters:
    key: bytes | None = None
    value: bytes | None = None
    header: tuple[str, bytes | None] | None = None
    json_path: object = None  # a parsed jsonpath-ng expression
    compare: tuple[str, object] | None = None  # (operator, JSON literal) the path's values are compared with
    steps: list | None = None  # the path as keys to follow, when it is a plain one (plain_steps)
    compiled: object = None  # any other path json_paths.compile_path evaluates directly: f(value, root)
    required: bytes | None = None  # bytes every matching value holds, unless escaped (see required_text)
    number: object = None  # a member and number every match holds, unless escaped (json_paths.NumberNeed)
    either: list | None = None  # needs (bytes, NumberNeed) of which every match holds one (json_paths.either_need)

    @classmethod
    def parse(cls, key: str | None, value: str | None, header: str | None, json_path: str | None) -> "Filters":
        f = cls(key=key.encode() if key is not None else None, value=value.encode() if value else None)
        if header:
            name, sep, wanted = header.partition("=")
            f.header = (name, wanted.encode() if sep else None)
        if json_path:
            f.json_path, f.compare = parse_json_path(json_path)
            f.steps = plain_steps(f.json_path)
            try:
                f.compiled = json_paths.compile_path(f.json_path) if f.steps is None else None
            except json_paths.BadPattern as exc:
                raise BadRequest(f"bad JSON path {json_path!r}: {exc}") from None
            f.required = required_text(f.json_path, f.compare)
            f.number = json_paths.number_need(f.json_path, f.compare) if f.required is None else None
            if f.compare is None and f.required is None and f.number is None:
                f.either = json_paths.either_need(f.json_path)
        return f

    def select(self, batch: list) -> list:
        """The records of ``batch`` matching every filter: one pass over the list per filter given, cheapest first
        (key, value substring, header, then the JSON path, which parses the value)."""
        if self.key is not None:
            key = self.key
            batch = [m for m in batch if m.key() == key]
        if self.value is not None:
            needle = self.value
            batch = [m for m in batch if needle in (m.value() or b"")]
        if self.header is not None:
            batch = [m for m in batch if self.header_match(m)]
        if self.json_path is not None:
            batch = [m for m in batch if self._json_match(m.value())]
        return batch

    def header_match(self, m) -> bool:
        name, wanted = self.header
        return any(k == name and (wanted is None or v == wanted) for k, v in (m.headers() or ()))

    def _json_match(self, raw: bytes | None) -> bool:
        if not raw:
            return False
        if self.required is not None and self.required not in raw and b"\\" not in raw:
            return False  # cannot hold the string the path compares with: no need to parse it
        if self.number is not None and b"\\" not in raw and not self.number.found_in(raw):
            return False  # nor the member and number it needs
        if self.either is not None and b"\\" not in raw and \
                not any(n in raw if isinstance(n, bytes) else n.found_in(raw) for n in self.either):
            return False  # nor any of the things one of which it needs
        try:
            found = self._find(orjson.loads(raw))
        except orjson.JSONDecodeError:
            return False
        if any(isinstance(x, float) for x in found):  # orjson reads integers beyond 64 bits as floats
            found = self._find(json.loads(raw))
        if self.compare is None:
            return bool(found)
        op, literal = self.compare
        return any(_compare(x, op, literal) for x in found)

    def _find(self, doc) -> list:
        steps = self.steps
        if steps is None:
            if self.compiled is not None:
                return self.compiled(doc, doc)
            return [x.value for x in self.json_path.find(doc)]
        found, doc = follow(doc, steps)  # a plain path ($.a.b[0]): looked up directly, as jsonpath-ng finds it
        return [doc] if found else []


def follow(doc, steps: list) -> tuple[bool, object]:
    """(found, the value) at the end of ``steps`` (keys and indexes) from ``doc``."""
    for step in steps:
        if isinstance(step, str):
            if not isinstance(doc, dict) or step not in doc:
                return False, None
        elif not isinstance(doc, list) or step >= len(doc):
            return False, None
        doc = doc[step]
    return True, doc


def required_text(expression, compare) -> bytes | None:
    """A string the value must hold, as JSON writes it, for the path to match, unless the value holds a
    backslash (an escape could spell it otherwise): the literal of ``PATH == "s"``, or of a filter's
    ``@.field == 's'`` when every part of the path must match for it to find anything (no union, no or, no
    negation). None when there is no such string."""
    if compare is not None:
        op, literal = compare
        return json.dumps(literal, ensure_ascii=False).encode() if op == "==" and isinstance(literal, str) else None
    found = [json_paths.need_of(e) for e in json_paths.necessary_conditions(expression) or ()]
    literals = [n for n in found if isinstance(n, bytes)]
    return max(literals, key=len) if literals else None


def plain_steps(expression, root=None) -> list | None:
    """A jsonpath-ng expression made only of single field names and non-negative indexes (``$.user.id``,
    ``$.items[0].sku``; from ``root``, jsonpath-ng's Root by default, This for a filter's ``@.a.b``) as the keys to
    follow; None for anything else (filters, wildcards, slices, ...)."""
    from jsonpath_ng.jsonpath import Child, Fields, Index, Root

    root = root or Root
    steps: list = []

    def walk(node, first: bool) -> bool:
        if isinstance(node, Child):
            return walk(node.left, first) and walk(node.right, False)
        if type(node) is root:
            return first
        if isinstance(node, Fields) and len(node.fields) == 1 and node.fields[0] != "*":
            steps.append(node.fields[0])
            return True
        if type(node) is Index and len(node.indices) == 1 and node.indices[0] >= 0:
            steps.append(node.indices[0])
            return True
        return False

    return steps if walk(expression, True) else None


def parse_json_path(text: str):
    """A jsonpath-ng expression (its extended syntax: filters such as ``$.items[?(@.price > 10)]``), optionally
    followed by a comparison with a JSON literal: ``$.user.id == "u1"``, ``$.amount >= 100``."""
    from jsonpath_ng.exceptions import JSONPathError
    from jsonpath_ng.ext import parse

    try:
        return parse(text), None
    except (JSONPathError, Exception) as first:  # jsonpath-ng's lexer raises bare Exceptions too
        found = COMPARISON.match(text.strip())
        if found is None:
            raise BadRequest(f"bad JSON path {text!r}: {first}") from None
        try:
            literal = json.loads(found["literal"])
        except ValueError:
            raise BadRequest(f"bad JSON path {text!r}: {found['literal']!r} is not a JSON value "
                             "(strings take double quotes)") from None
        try:
            return parse(found["path"]), (found["op"], literal)
        except (JSONPathError, Exception) as exc:
            raise BadRequest(f"bad JSON path {found['path']!r}: {exc}") from None


def _compare(x, op: str, literal) -> bool:
    """``PATH OP literal`` for one value found: as Python compares, except that a boolean is no number (JSON's
    true is not 1): as in a filter (RFC 9535) it equals only itself and is not ordered (``<=``: equal)."""
    if isinstance(x, bool) or isinstance(literal, bool):
        same = x is literal
        return {"==": same, "!=": not same, "<=": same, ">=": same}.get(op, False)
    if op == "==":
        return x == literal
    if op == "!=":
        return x != literal
    try:
        return {">": x > literal, ">=": x >= literal, "<": x < literal, "<=": x <= literal}[op]
    except TypeError:  # a string against a number: no match, not an error
        return False


@dataclass
class Scan:
    """What a search asks: where to start, which way, how many matches at most, how many records at most."""
    topic: str
    partitions: list[int]
    start: str = "newest"
    offset: int | None = None
    timestamp_ms: int | None = None
    backward: bool = True
    limit: int = 50
    max_scan: int = 100_000
    filters: Filters = field(default_factory=Filters)
    cursor: dict[int, int] | None = None  # where a previous page left off: partition -> next offset (see Result)
    # the signed-in user's SASL settings (librdkafka's names): the scan reads as them, so their ACLs decide;
    # None: the dashboard's own credentials
    credentials: dict | None = field(default=None, repr=False)


@dataclass
class Result:
    records: list = field(default_factory=list)
    scanned: int = 0
    total: int = 0
    stopped: str = "end"  # end | limit | budget
    # where the next page starts, per partition with more to read in the scan's direction: forward, the next
    # offset to read; backward, the offset below which to read on. None: nothing is left
    cursor: dict[int, int] | None = None

    @property
    def progress(self) -> dict:
        return progress(self.scanned, self.total, len(self.records), self.stopped)


def progress(scanned: int, total: int, matches: int, stopped: str | None) -> dict:
    """The progress of a scan; ``stopped`` None while it runs."""
    ending = {None: " …", "end": "", "limit": " (limit reached)", "budget": " (scan budget spent)"}[stopped]
    return {"scanned": scanned, "total": total, "matches": matches, "stopped": stopped,
            "line": f"scanned {count(scanned)} of {count(total)}, {matches} match{'' if matches == 1 else 'es'}{ending}"}


def count(n: int) -> str:
    """1234 -> 1,234; 1_200_000 -> 1.2M (as the progress line shows them)."""
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M".replace(".0M", "M")
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    return f"{n:,}"


def new_consumer(bootstrap: str, isolation: str, credentials: dict | None = None) -> Consumer:
    return Consumer(consumer_config(bootstrap, overrides={
        "log_level": 0, "isolation.level": isolation, "enable.partition.eof": True, "fetch.wait.max.ms": 5,
        "fetch.error.backoff.ms": 10,
        "queued.min.messages": 100_000, **(credentials or {})}))


def ranges(consumer: Consumer, scan: Scan) -> dict[int, tuple[int, int]]:
    """Per partition, the offsets [first, end) the scan may read, from the start asked for."""
    out = {}
    for p in scan.partitions:
        low, high = watermark_offsets(consumer, TopicPartition(scan.topic, p), 10)
        if scan.cursor is not None:  # a page on: only the partitions with more to read, from where they stopped
            at = min(max(scan.cursor.get(p, low if scan.backward else high), low), high)
            out[p] = (low, at) if scan.backward else (at, high)
        elif scan.start == "offset":
            if not low <= scan.offset <= high and len(scan.partitions) == 1:
                raise BadRequest(f"offset {scan.offset} is out of range for partition {p} "
                                 f"(its records are at offsets {low}..{high - 1}; {high} is the next one)")
            at = min(max(scan.offset, low), high)
            out[p] = (low, min(at + 1, high)) if scan.backward else (at, high)
        elif scan.start == "timestamp":
            # backward from a time: the records written up to it (the first offset at or after time + 1)
            wanted = scan.timestamp_ms + (1 if scan.backward else 0)
            found = consumer.offsets_for_times([TopicPartition(scan.topic, p, wanted)], timeout=10)[0].offset
            at = found if found >= 0 else high
            out[p] = (low, at) if scan.backward else (at, high)
        else:
            out[p] = (low, high)
    return out


def read_windows(consumer: Consumer, topic: str, windows: dict[int, tuple[int, int]], on_batch,
                 deadline_s: float = 60.0, stop: threading.Event | None = None) -> None:
    """Every data record of each partition's [a, b), handed to ``on_batch(partition, records)`` in offset order per
    partition; a window ends at its last offset, at the partition's end, or past its end (control records,
    compaction). ``stop`` set: raises Cancelled before the next fetch."""
    open_ = {p: w for p, w in windows.items() if w[0] < w[1]}
    if not open_:
        return
    consumer.assign([TopicPartition(topic, p, a) for p, (a, _) in open_.items()])
    deadline = time.monotonic() + deadline_s
    at = {p: a for p, (a, _) in open_.items()}  # the next offset expected
    while open_ and time.monotonic() < deadline:
        if stop is not None and stop.is_set():
            consumer.unassign()
            raise Cancelled()
        # consume() waits for as many records as it is asked for: never more than the windows still hold
        batch = consumer.consume(max(min(sum(open_[p][1] - at[p] for p in open_), 10_000), 1), 0.2)
        if not batch:
            continue
        first, last = batch[0], batch[-1]
        if len(open_) == 1 and first.error() is None and first.partition() in open_ \
                and last.error() is None and last.partition() == first.partition() \
                and last.offset() < open_[first.partition()][1] - 1:
            # the common case: one partition, mid-window (no end-of-partition event can sit before its last record)
            at[last.partition()] = last.offset() + 1
            on_batch(first.partition(), [m for m in batch if m.error() is None])
            continue
        by_partition: dict[int, list] = {}
        for m in batch:
            p = m.partition()
            err = m.error()
            if err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:  # not the reader's to READ
                consumer.unassign()
                raise KafkaException(err)
            window = open_.get(p)
            if window is None:
                continue
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    del open_[p]
                continue
            off = m.offset()
            at[p] = off + 1
            if off < window[1]:
                by_partition.setdefault(p, []).append(m)
            if off >= window[1] - 1:
                del open_[p]
                consumer.incremental_unassign([TopicPartition(topic, p)])
        for p, records in by_partition.items():
            on_batch(p, records)
    consumer.unassign()
    if open_:  # never a partial answer passed off as a whole one
        p, (a, b) = next(iter(open_.items()))
        raise ScanTimeout(f"the cluster did not deliver {topic} partition {p}'s offsets {at[p]}..{b - 1} "
                          f"within {deadline_s:.0f} s")


def search(bootstrap: str, scan: Scan, on_progress=None, stop: threading.Event | None = None,
           on_matches=None) -> Result:
    """The records matching ``scan.filters`` from its start in its direction: at most ``limit`` of them, after
    at most ``max_scan`` records read. Each partition reads a chunk per round (500, doubling to 100k); backward,
    a chunk is read forward and turned around. Matches from several partitions come newest (or oldest) first by
    timestamp. ``on_progress(progress)`` hears after every round how far the scan has come, ``on_matches(records)``
    each round's new matches (rendered, up to the limit); ``stop`` set ends the scan (Cancelled) before its next
    fetch."""
    if stop is not None and stop.is_set():
        raise Cancelled()
    consumer = new_consumer(bootstrap, "read_uncommitted", scan.credentials)
    # the fast path where it serves (see scan_columns.py): the dashboard's own plaintext connection, never a user's
    columnar = scan_columns.reader_options(bootstrap) if scan.credentials is None else None
    result = Result()
    try:
        bounds = ranges(consumer, scan)
        result.total = sum(b - a for a, b in bounds.values())
        position = {p: (b if scan.backward else a) for p, (a, b) in bounds.items()}
        chunk = max(FIRST_CHUNK, scan.limit)
        matches: list = []
        while True:
            todo = {p for p, (a, b) in bounds.items() if (position[p] > a if scan.backward else position[p] < b)}
            budget = scan.max_scan - result.scanned
            if not todo:
                break
            if budget <= 0:
                result.stopped = "budget"
                break
            share = max(min(chunk, budget // len(todo)), 1)
            windows = {}
            for p in sorted(todo)[:budget]:
                a, b = bounds[p]
                windows[p] = (max(a, position[p] - share), position[p]) if scan.backward else \
                    (position[p], min(b, position[p] + share))
            got: dict[int, list] = {p: [] for p in windows}

            def take(p, batch):
                result.scanned += len(batch)
                got[p] += scan.filters.select(batch)

            def take_columns(p, batch):
                result.scanned += batch.num_rows
                got[p] += scan_columns.select(scan.filters, batch)

            if columnar is not None:
                scan_columns.read_windows(*columnar, scan.topic, windows, take_columns, stop, Cancelled)
            else:
                read_windows(consumer, scan.topic, windows, take, stop=stop)
            shown = len(matches)
            for p, (a, b) in windows.items():
                position[p] = a if scan.backward else b
                matches += reversed(got[p]) if scan.backward else got[p]
            if on_matches is not None and shown < min(len(matches), scan.limit):
                # a preview as they are found (no transaction state yet; the answer orders and marks them)
                on_matches([render(m, None) for m in matches[shown:scan.limit]])
            if len(matches) >= scan.limit:
                result.stopped = "limit"
                break
            chunk = min(chunk * 2, MAX_CHUNK)
            if on_progress is not None:
                on_progress(progress(result.scanned, result.total, len(matches), None))
        if len(scan.partitions) > 1:  # one partition stays in offset order, whatever its timestamps
            matches.sort(key=lambda m: (m.timestamp()[1], m.partition(), m.offset()), reverse=scan.backward)
        resume = {p: position[p] for p, (a, b) in bounds.items() if (position[p] > a if scan.backward
                                                                      else position[p] < b)}
        if len(matches) > scan.limit:
            for m in matches[scan.limit:]:  # read but not shown: the next page starts with them
                p, o = m.partition(), m.offset()
                resume[p] = max(resume.get(p, o + 1), o + 1) if scan.backward else min(resume.get(p, o), o)
            matches = matches[:scan.limit]
            result.stopped = "limit"
        result.cursor = resume or None
        states = transaction_states(bootstrap, scan.topic, matches, scan.credentials)
        result.records = [render(m, states.get((m.partition(), m.offset()))) for m in matches]
        return result
    finally:
        consumer.close()


def transaction_states(bootstrap: str, topic: str, records: list,
                       credentials: dict | None = None) -> dict[tuple[int, int], str]:
    """(partition, offset) -> "aborted" or "open" for the records shown (see the module's docstring); records
    committed or written outside a transaction are not in the answer."""
    wanted: dict[int, list[int]] = {}
    for m in records:
        wanted.setdefault(m.partition(), []).append(m.offset())
    if not wanted:
        return {}
    consumer = new_consumer(bootstrap, "read_committed", credentials)
    states = {}
    try:
        for p, offsets in wanted.items():
            _, stable = watermark_offsets(consumer, TopicPartition(topic, p), 10)  # the LSO
            pending = sorted(o for o in offsets if o < stable)
            states.update({(p, o): "open" for o in offsets if o >= stable})
            while pending:
                first = pending[0]
                group = [o for o in pending if o < first + BRIDGE]  # one pass: reading is cheaper than seeking
                seen: set[int] = set()
                read_windows(consumer, topic, {p: (first, group[-1] + 1)},
                             lambda _, batch: seen.update(m.offset() for m in batch), deadline_s=20.0)
                for o in group:
                    if o not in seen:
                        states[(p, o)] = "aborted"
                pending = pending[len(group):]
    finally:
        consumer.close()
    return states


def payload(data: bytes | None) -> dict | None:
    """Bytes as the page shows them: ``text`` when they are UTF-8 (and ``json``, pretty, when that text is a JSON
    object or array), else ``base64``; always their ``size``."""
    if data is None:
        return None
    out: dict = {"size": len(data)}
    try:
        out["text"] = data.decode()
    except UnicodeDecodeError:
        out["base64"] = base64.b64encode(data).decode()
        return out
    if out["text"][:1] in ("{", "["):
        try:
            out["json"] = json.dumps(json.loads(out["text"]), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    return out


TIMESTAMP_TYPES = {1: "create", 2: "log-append"}


def render(m, transaction: str | None) -> dict:
    kind, ts = m.timestamp()
    return {"partition": m.partition(), "offset": m.offset(), "timestamp": ts if ts >= 0 else None,
            "timestamp_type": TIMESTAMP_TYPES.get(kind), "key": payload(m.key()), "value": payload(m.value()),
            "headers": [{"name": k, "value": payload(v)} for k, v in (m.headers() or ())],
            "transaction": transaction}
