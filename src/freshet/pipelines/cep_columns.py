"""The routing of ``freshet run cep`` on a chunk's Arrow columns instead of event by event.

``freshet.pipelines.cep._router`` routes each event in Python: parse it, look its rules up, read each rule's key
and time, cut it down to the fields the rule reads, write that out. Here a whole chunk is parsed at once into
columns (Arrow's JSON reader), and each rule's events, keys, buckets, times and projected texts come from column
operations; Python runs per pack, not per event (and per event only for a rule whose WHERE has more than its
``field = value`` / ``IN`` lookup, on the events that pass the lookup).

It takes only what it routes exactly as the event-by-event path does, and answers None otherwise (that path
then routes the chunk): every rule looked up by one top-level field of texts or integers, keyed by at most one
top-level field of texts or integers, timed by a top-level field of integers (epoch milliseconds); every value
one JSON object orjson would parse the same, on one line (no NaN or Infinity, which Arrow's reader takes and
orjson refuses; no blank value). A rule's texts are built from columns of texts, integers and booleans (a
double may have been an integer in its event, which the text must keep); any other field it reads (a float,
an object, a list, a text JSON would escape) makes its events projected one by one. A projected text leaves
out a field whose value is null, as a missing field reads the same (null) in every expression.
"""

from __future__ import annotations

import weakref
import zlib

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from freshet.cep.matcher import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS, CompiledRule, RuleRouter

_REFUSED = r"\n|NaN|Infinity|^\s*$"  # values the reader would take otherwise than orjson, or not one a line
_ESCAPED = r'[\x00-\x1f"\\]'  # texts JSON writes with escapes
_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def column_routing(router: RuleRouter) -> ColumnRouting:
    """The column routing of ``router`` (made once a router)."""
    plan = _PLANS.get(router)
    if plan is None:
        plan = _PLANS[router] = ColumnRouting(router)
    return plan


class ColumnRouting:
    """Routes a chunk of (value, topic, partition, offset) for ``router``'s rules through Arrow columns."""

    def __init__(self, router: RuleRouter) -> None:
        self.router = router
        self.failures = 0  # chunks in a row this could not route
        self.chunks = 0
        ok = bool(router.rules) and not router.others
        for rule in router.rules:
            r = rule.rule
            if len(r.order_by) != 1 or len(r.partition_by) > 1 or any(len(p) != 1 for p in r.partition_by):
                ok = False
        # field -> (Arrow type its values have, {value: [(rule, exact)]})
        self.lookups: dict[str, tuple] = {}
        for name, table in router.by_value.items():
            kinds = {type(v) for v in table}
            if kinds == {str}:
                self.lookups[name] = (pa.string(), table)
            elif kinds == {int}:
                self.lookups[name] = (pa.int64(), table)
            else:
                ok = False
        self.ok = ok
        self.keys: dict = {}  # a key value -> (its JSON text, bucket), across chunks

    def wants(self) -> bool:
        """Whether to try this chunk: after three chunks in a row it could not route, one in 64."""
        self.chunks += 1
        return self.ok and (self.failures < 3 or self.chunks % 64 == 0)

    def route(self, chosen: pa.RecordBatch, buckets: int) -> tuple[list[tuple], int | None] | None:
        """The pack rows (``ROUTED``'s columns) of ``chosen``'s events and the newest event time among them (an
        event no rule wants included, read through the first rule's time), or None if this cannot route them."""
        found = self._route(chosen, buckets)
        self.failures = 0 if found is not None else self.failures + 1
        return found

    def _route(self, chosen: pa.RecordBatch, buckets: int):
        n = chosen.num_rows
        if n == 0:
            return [], None
        values = chosen.column(0)
        if values.null_count or pc.any(pc.match_substring_regex(values, _REFUSED)).as_py():
            return None
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), values), "\n")[0]
        data = joined.as_buffer()
        try:
            table = pj.read_json(pa.BufferReader(data),
                                 read_options=pj.ReadOptions(use_threads=False, block_size=max(data.size + 1, 1 << 20)),
                                 parse_options=pj.ParseOptions(newlines_in_values=False))
        except pa.ArrowException:  # not JSON, not an object, a field's type changing, a key twice
            return None
        if table.num_rows != n:  # a value holding two objects
            return None
        columns = _Columns(table)
        wanted_by = []  # (rule, rows) in the router's order
        for rule in self.router.rules:
            rows = self._rows_of(rule, columns, chosen)
            if rows is None:
                return None
            wanted_by.append((rule, rows))
        any_wanted = np.zeros(n, bool)
        newest = None
        out = []
        orders = (chosen.column(2).to_numpy(zero_copy_only=False).astype(np.int64) << 40) | \
            chosen.column(3).to_numpy(zero_copy_only=False).astype(np.int64)
        texts_by_fields: dict[tuple, tuple] = {}  # fields -> (rows, texts): made once for rules reading the same
        for rule, rows in wanted_by:
            if not len(rows):
                continue
            any_wanted[rows] = True
            keyed = self._keys_of(rule, columns, rows, buckets)
            if keyed is None:
                return None
            pkeys, bucket_of_row = keyed
            texts = self._texts(rule, columns, values, rows, texts_by_fields)
            times = columns.ints(rule.rule.order_by[0])[0][rows]
            perm = np.argsort(bucket_of_row, kind="stable")
            sorted_buckets = bucket_of_row[perm]
            cuts = [0, *(np.flatnonzero(np.diff(sorted_buckets)) + 1).tolist(), len(rows)]
            pkeys, times, ords = pkeys[perm], times[perm], orders[rows][perm]
            texts = [texts[i] for i in perm.tolist()]
            for begin, end in zip(cuts, cuts[1:]):
                span = times[begin:end].tolist()
                top = max(span)
                out.append((rule.name, int(sorted_buckets[begin]), top, "\n".join(pkeys[begin:end].tolist()),
                            orjson.dumps(span).decode(), orjson.dumps(ords[begin:end].tolist()).decode(),
                            "\n".join(texts[begin:end])))
                if newest is None or top > newest:
                    newest = top
        # the events no rule wants tell the time through the first rule's time field
        clock = columns.ints(self.router.rules[0].rule.order_by[0])
        if clock is None:
            return None
        times, valid = clock
        unwanted = valid & ~any_wanted
        if unwanted.any():
            seen = int(times[unwanted].max())
            if newest is None or seen > newest:
                newest = seen
        return out, newest

    def _rows_of(self, rule: CompiledRule, columns: _Columns, chosen: pa.RecordBatch):
        """The rows ``rule`` wants (numpy indices), or None if this cannot tell."""
        n = chosen.num_rows
        mask = np.zeros(n, bool)
        exact = True
        for name, (kind, table) in self.lookups.items():
            codes = columns.codes(name, kind)
            if codes is None:
                return None
            if codes is False:  # no event has a value there
                continue
            index, dictionary = codes
            allowed = np.zeros(len(dictionary) + 1, bool)  # the last: null
            for i, value in enumerate(dictionary):
                for candidate, is_exact in table.get(value, ()):
                    if candidate is rule:
                        allowed[i] = True
                        exact = exact and is_exact
            mask |= allowed[index]
        if rule.rule.topic is not None:
            mask &= pc.fill_null(pc.equal(chosen.column(1), rule.rule.topic), False).to_numpy(zero_copy_only=False)
        clock = columns.ints(rule.rule.order_by[0])
        if clock is None:
            return None
        mask &= clock[1]
        rows = np.flatnonzero(mask)
        if not exact and len(rows):  # the rest of the WHERE, event by event
            texts = chosen.column(0).take(pa.array(rows)).to_pylist()
            rows = rows[np.array([rule.accepts(orjson.loads(t)) for t in texts], bool)]
        return rows

    def _keys_of(self, rule: CompiledRule, columns: _Columns, rows: np.ndarray, buckets: int):
        """Each row's partition key (JSON text, a numpy array of objects) and bucket, or None."""
        if not rule.rule.partition_by:
            pkey = "[]"
            return (np.full(len(rows), pkey, dtype=object),
                    np.full(len(rows), zlib.crc32(pkey.encode()) % buckets, dtype=np.int64))
        name = rule.rule.partition_by[0][0]
        made = columns.made.get(("key", name))
        if made is None:
            made = columns.made[("key", name)] = self._keys_in(columns, name, buckets)
        if made is False:
            return None
        texts, numbers, index = made
        index = index[rows]
        return texts[index], numbers[index]

    def _keys_in(self, columns: _Columns, name: str, buckets: int):
        """(each code's key text and bucket, each row's code) of a key field's column; False if of another type."""
        codes = columns.codes(name, None)
        if codes is None:
            return False
        if codes is False:
            dictionary, index = [], np.zeros(columns.n, np.int64)
        else:
            index, dictionary = codes
        texts, numbers = [], []
        known = self.keys
        if len(known) > 100_000:
            known.clear()
        for value in (*dictionary, None):
            entry = known.get((type(value), value))
            if entry is None:
                pkey = orjson.dumps([value]).decode()
                entry = known[(type(value), value)] = (pkey, zlib.crc32(pkey.encode()) % buckets)
            texts.append(entry[0])
            numbers.append(entry[1])
        return np.array(texts, dtype=object), np.array(numbers, np.int64), index

    def _texts(self, rule: CompiledRule, columns: _Columns, values, rows: np.ndarray, made: dict) -> list[str]:
        """The JSON text of each row cut down to the fields ``rule`` reads (``CompiledRule.project``), from the
        columns when they allow it, else event by event."""
        fields = rule.fields
        cached = made.get(fields)
        if cached is not None and len(cached[0]) == len(rows) and (cached[0] == rows).all():
            return cached[1]
        pieces = []
        for name in fields:
            piece = columns.piece(name)
            if piece is False:
                pieces = None
                break
            if piece is not None:
                pieces.append(piece)
        taken = pa.array(rows)
        if pieces is None:
            texts = [_project(rule, orjson.loads(t)) for t in values.take(taken).to_pylist()]
        elif not pieces:
            texts = ["{}"] * len(rows)
        else:
            body = pc.binary_join_element_wise(*(p.take(taken) for p in pieces), ",", null_handling="skip")
            texts = pc.binary_join_element_wise("{", body, "}", "").to_pylist()
        made[fields] = (rows, texts)
        return texts


def _project(rule: CompiledRule, event: dict) -> str:
    return orjson.dumps(event if event.keys() <= rule.field_set else rule.project(event)).decode()


class _Columns:
    """A parsed chunk's columns, each read once: dictionary codes, integers, JSON pieces."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.names = set(table.column_names)
        self.n = table.num_rows
        self._codes: dict = {}
        self._ints: dict = {}
        self._pieces: dict = {}
        self.made: dict = {}  # what the routing made of the columns, e.g. each key's text and bucket

    def _column(self, name: str):
        column = self.table.column(name)
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()

    def codes(self, name: str, kind):
        """(each row's code, numpy; the null rows: ``len(dictionary)``, the dictionary's Python values) of a
        column of ``kind`` (any of texts and integers if None); False when no row has a value; None when the
        column holds another type."""
        key = (name, kind)
        if key not in self._codes:
            self._codes[key] = self._make_codes(name, kind)
        return self._codes[key]

    def _make_codes(self, name: str, kind):
        if name not in self.names:
            return False
        column = self._column(name)
        if pa.types.is_null(column.type):
            return False
        if (column.type != kind) if kind is not None else column.type not in (pa.string(), pa.int64()):
            return None
        encoded = column.dictionary_encode()
        dictionary = encoded.dictionary.to_pylist()
        index = pc.fill_null(encoded.indices, len(dictionary)).to_numpy(zero_copy_only=False).astype(np.int64)
        return index, dictionary

    def ints(self, name: str):
        """(values with 0 for null, whether each row has one) of a column of event times (integers, epoch
        milliseconds; one beyond a timestamp's range counts as none); both all-zero/False when no row has a value;
        None when the column holds another type."""
        if name not in self._ints:
            self._ints[name] = self._make_ints(name)
        return self._ints[name]

    def _make_ints(self, name: str):
        if name not in self.names:
            return np.zeros(self.n, np.int64), np.zeros(self.n, bool)
        column = self._column(name)
        if pa.types.is_null(column.type):
            return np.zeros(self.n, np.int64), np.zeros(self.n, bool)
        if column.type != pa.int64():
            return None
        values = pc.fill_null(column, 0).to_numpy(zero_copy_only=False)
        # a time beyond a timestamp's range is no time, as in the event-by-event path (CompiledRule.time_of)
        valid = pc.is_valid(column).to_numpy(zero_copy_only=False) & \
            (values >= MIN_EVENT_TIME_MS) & (values <= MAX_EVENT_TIME_MS)
        return np.where(valid, values, 0), valid

    def piece(self, name: str):
        """``"name":value`` of each row as JSON writes it (null where the row has no value); None when no row has
        a value; False when the column's values cannot be written from the column alone."""
        if name not in self._pieces:
            self._pieces[name] = self._make_piece(name)
        return self._pieces[name]

    def _make_piece(self, name: str):
        if name not in self.names:
            return None
        column = self._column(name)
        kind = column.type
        if pa.types.is_null(kind):
            return None
        if kind == pa.string():
            if pc.any(pc.match_substring_regex(column, _ESCAPED)).as_py():
                return False
            value = pc.binary_join_element_wise('"', column, '"', "")
        elif kind == pa.int64():
            value = pc.cast(column, pa.string())
        elif kind == pa.bool_():
            value = pc.if_else(column, "true", "false")
        else:
            return False
        return pc.binary_join_element_wise(orjson.dumps(name).decode() + ":", value, "")
