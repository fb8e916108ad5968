"""The matcher: a rule's pattern run over one partition's rows in event-time order.

Semantics are MATCH_RECOGNIZE's (SQL:2016, as Oracle and Trino run it): from each start row, the
*preferred* match is the first one found by trying the pattern's choices in order (greedy quantifiers
take one more iteration before stopping, reluctant ones stop first, alternatives left to right);
DEFINE conditions are checked as rows are mapped, and may look at rows mapped earlier. After a match,
``AFTER MATCH SKIP`` says where the next search starts; without one, the next row.

The pattern compiles to a small program (``var``, ``split``, ``jmp``, ``done``) run by a backtracking
interpreter with an explicit stack (no recursion limit). On a stream the rows come in as the watermark
passes them, so the interpreter can run out of rows: the attempt from that start row is then
*pending* until more rows come or the time limit (WITHIN) says no later row can belong to it.
Matches therefore come out in the order of their first rows, each exactly once, and the same as the
whole sequence matched in one go would give (the property the tests check).
"""

from __future__ import annotations

import math
import re
from operator import itemgetter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson

from .expressions import (
    Aggregate, Binary, Frame, Literal, _hashable, compile_expression, compile_row_expression, fields_used, get_path,
    holds,
)
from .rules import Alt, Repeat, Rule, Seq, Var

MATCH, NO_MATCH, PENDING = "match", "no match", "pending"
_TIME, _TIME_ORDER = itemgetter(0), itemgetter(0, 1)  # of a buffered (time, order, event)


def compile_pattern(node) -> list[tuple]:
    """The program of a pattern: a list of ``("var", name)``, ``("split", preferred, other)``,
    ``("jmp", to)`` and a final ``("done",)``."""
    program: list[list] = []

    def emit(*ins) -> int:
        program.append(list(ins))
        return len(program) - 1

    def gen(n) -> None:
        if isinstance(n, Var):
            emit("var", n.name)
        elif isinstance(n, Seq):
            for item in n.items:
                gen(item)
        elif isinstance(n, Alt):
            jumps = []
            for option in n.options[:-1]:
                split = emit("split", None, None)
                program[split][1] = len(program)
                gen(option)
                jumps.append(emit("jmp", None))
                program[split][2] = len(program)
            gen(n.options[-1])
            for j in jumps:
                program[j][1] = len(program)
        elif isinstance(n, Repeat):
            for _ in range(n.min):
                gen(n.node)
            if n.max is None:
                top = emit("split", None, None)
                body = len(program)
                gen(n.node)
                emit("jmp", top)
                out = len(program)
                program[top][1:] = [body, out] if n.greedy else [out, body]
            else:
                splits = []
                for _ in range(n.max - n.min):
                    split = emit("split", None, None)
                    splits.append(split)
                    program[split][1] = len(program)  # provisional: body first
                    gen(n.node)
                out = len(program)
                for split in splits:
                    body = split + 1
                    program[split][1:] = [body, out] if n.greedy else [out, body]
        else:
            raise TypeError(n)

    gen(node)
    emit("done")
    return [tuple(i) for i in program]


_SECONDS: dict[tuple[str, str], int] = {}  # ("YYYY-MM-DDTHH:MM:SS", zone) -> epoch seconds


# the event times a Spark timestamp (microseconds in 64 bits) holds, in milliseconds: an event whose time is beyond
# them (a time in nanoseconds by mistake) has no time, as one without the field, instead of failing the query
MIN_EVENT_TIME_MS, MAX_EVENT_TIME_MS = -(2**63) // 1000 + 1, (2**63 - 1) // 1000


def event_time_ms(value) -> int | None:
    """An event time as epoch milliseconds: numbers are milliseconds, strings ISO 8601 (UTC unless they
    say otherwise); None for none, or one beyond what a timestamp holds."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        if not MIN_EVENT_TIME_MS <= value <= MAX_EVENT_TIME_MS:  # NaN too
            return None
        return int(value)
    if isinstance(value, str):
        # the common shape, 2026-01-01T00:02:23.128Z: the second is parsed once, the fraction here
        if len(value) >= 20 and value[10] in "T " and value[19] == ".":
            end = 20
            while end < len(value) and value[end].isdigit():
                end += 1
            fraction, zone = value[20:end], value[end:]
            if fraction:
                key = (value[:19], zone)
                seconds = _SECONDS.get(key)
                if seconds is None:
                    seconds = _parse_seconds(value[:19] + zone)
                    if seconds is None:
                        return None
                    if len(_SECONDS) > 10_000:
                        _SECONDS.clear()
                    _SECONDS[key] = seconds
                return seconds * 1000 + int((fraction + "00")[:3])
        try:
            when = datetime.fromisoformat(value.strip().replace(" ", "T", 1))
        except ValueError:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return int(when.timestamp() * 1000)
    return None


def _parse_seconds(text: str) -> int | None:
    try:
        when = datetime.fromisoformat(text.replace(" ", "T", 1))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp())


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def iso_utc(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC text with milliseconds, ``2026-01-01T00:02:23.128Z`` (the text
    Spark's ``to_json`` writes for a timestamp in a UTC session)."""
    when = _EPOCH + timedelta(milliseconds=ms)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


_JSON_AS_IS = frozenset({str, int, bool, type(None)})  # the types json_value gives back as they are


def json_value(value):
    """A measure or key value as JSON holds it: a number that is not finite becomes null (JSON has no
    NaN or Infinity), anything that is not a JSON type its text."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return str(value)


@dataclass(slots=True)
class Match:
    rule: str
    key: tuple
    start_ms: int
    end_ms: int
    rows: int
    measures: dict
    labels: tuple = ()
    kind: str = "match"  # or "timeout": a partial match the time limit ended (side output)
    key_names: tuple = ()  # the PARTITION BY fields, as the key's names (``a.b`` for a nested field)

    def alert(self) -> dict:
        """The alert record, the one shape of a match wherever it goes: a line of ``freshet rules try``, a
        record of ``freshet run cep``'s topic (see docs/cep.md, "Alerts")."""
        return {"rule": self.rule, "kind": self.kind, "key": self.key_object(),
                "match_start": iso_utc(self.start_ms), "match_end": iso_utc(self.end_ms), "rows": self.rows,
                "measures": self.measures_object()}

    def key_object(self) -> dict:
        """The alert's ``key``: one member per PARTITION BY field."""
        return {name: json_value(value) for name, value in zip(self.key_names, self.key)}

    def measures_object(self) -> dict:
        """The alert's ``measures``, as JSON values."""
        return {str(name): value if type(value) in _JSON_AS_IS else json_value(value)
                for name, value in self.measures.items()}


class CompiledRule:
    """A rule ready to run: its program, conditions and measures as closures."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.name = rule.name
        self.program = compile_pattern(rule.pattern)
        self.conditions = {v: compile_expression(c) for v, c in rule.defines.items()}
        # conditions on the current row alone run on the row itself, without a Frame: (on the row, on a Frame)
        self.tests = {v: (compile_row_expression(c, v, rule.tables), self.conditions[v])
                      for v, c in rule.defines.items()}
        # the program as the attempt runs it, each instruction four items: a variable's with its tests (the test on a
        # Frame only where there is none on the row; both None: any row), ("split", preferred, other, None), ...
        self.code = [("var", ins[1], *self._tests_of(ins[1])) if ins[0] == "var" else (*ins, None, None, None)[:4]
                     for ins in self.program]
        self.where = None  # row -> whether the event passes WHERE
        if rule.where is not None:
            where = compile_row_expression(rule.where, None, rule.tables)
            if where is None:  # an aggregate or PREV in WHERE looks at the one-row frame of the event itself
                on_frame, tables = compile_expression(rule.where), rule.tables
                where = lambda event: on_frame(Frame([event], 0, [], 0, None, tables))  # noqa: E731
            self.where = where
        self.measures = [(n, compile_expression(e)) for n, e in rule.measures]
        self.within = rule.within_ms
        self.absent = rule.absent
        self.absent_test = self.tests.get(rule.absent) if rule.absent else None
        self.tables = rule.tables
        self.key_names = tuple(".".join(path) for path in rule.partition_by)
        # the top-level fields the rule reads: an event cut down to them matches as the whole event does
        used = {path[0] for path in (*rule.partition_by, rule.order_by)}
        for node in (rule.where, *rule.defines.values(), *(e for _, e in rule.measures)):
            if node is not None:
                used |= fields_used(node)
        self.fields = tuple(sorted(used))
        self.field_set = frozenset(used)
        # row -> whether some match may start at the row (None: any row may): see first_row_test
        self.first_row = first_row_test(self.program, rule.defines, rule.tables)
        # the window scan of ``S*? T`` with T a growing count (see WindowScan), or None
        self.scan = WindowScan.of(self)

    def _tests_of(self, var: str) -> tuple:
        on_row, on_frame = self.tests.get(var, (None, None))
        return (on_row, None) if on_row is not None else (None, on_frame)

    def project(self, event: dict) -> dict:
        """``event`` with only the fields the rule reads (what a stream's matcher keeps in its state)."""
        return {name: event[name] for name in self.fields if name in event}

    # ---- routing an event to the rule ----------------------------------------------------------------

    def accepts(self, event: dict) -> bool:
        return self.where is None or bool(self.where(event))

    def key_of(self, event: dict) -> tuple:
        paths = self.rule.partition_by
        if len(paths) == 1 and len(paths[0]) == 1:  # PARTITION BY one top-level field: most rules
            return (event.get(paths[0][0]),)
        return tuple(get_path(event, path) for path in paths)

    def time_of(self, event: dict) -> int | None:
        path = self.rule.order_by
        value = event.get(path[0]) if len(path) == 1 else get_path(event, path)
        if type(value) is int and MIN_EVENT_TIME_MS <= value <= MAX_EVENT_TIME_MS:  # epoch milliseconds
            return value
        return event_time_ms(value)

    # ---- one attempt -----------------------------------------------------------------------------

    def attempt(self, rows: list, times: list, start: int, closed: bool, horizon: int | None):
        """Search for the preferred match starting at ``rows[start]``.

        ``closed``: no more rows will come; else ``horizon`` is the earliest event time a later row can
        have. Returns ``(MATCH, labels)``, ``(NO_MATCH, partial)`` (the longest partial match the time
        limit cut short, for timeouts) or ``(PENDING, None)``.
        """
        code, within = self.code, self.within
        n_rows = len(rows)
        limit = times[start] + within if within is not None else None
        # no later row can belong to a match from here: the time limit is behind the horizon
        exhausted = closed or (limit is not None and horizon is not None and horizon >= limit)
        stack = [(0, start, 0)]
        labels: list[str] = []
        partial: list[str] = []
        frame = None  # one Frame for the attempt's tests on frames, its current row and variable set per test
        while stack:
            pc, pos, depth = stack.pop()
            del labels[depth:]
            while True:
                op, var, on_row, on_frame = ins = code[pc]
                if op == "var":
                    if pos >= n_rows:
                        if not exhausted:
                            return PENDING, None
                        if limit is not None and len(labels) > len(partial):
                            partial = labels[:]
                        break
                    if limit is not None and times[pos] >= limit:
                        if len(labels) > len(partial):
                            partial = labels[:]
                        break
                    if on_row is not None:
                        if not on_row(rows[pos]):
                            break
                    elif on_frame is not None:
                        if frame is None:
                            # memo: the aggregates' partial results, for this start row's frames (see Frame)
                            frame = Frame(rows, start, labels, pos, var, self.tables, {})
                        else:
                            frame.current, frame.var = pos, var
                        if not on_frame(frame):
                            break
                    labels.append(var)
                    pos += 1
                    pc += 1
                elif op == "split":
                    stack.append((ins[2], pos, len(labels)))
                    pc = ins[1]
                elif op == "jmp":
                    pc = ins[1]
                else:  # done
                    if self.absent is None:
                        return MATCH, labels
                    verdict = self._absence(rows, times, start, labels, pos, closed, horizon, limit)
                    if verdict == MATCH:
                        return MATCH, labels
                    if verdict == PENDING:
                        return PENDING, None
                    break
        return NO_MATCH, partial

    def _absence(self, rows, times, start, labels, pos, closed, horizon, limit) -> str:
        on_row, on_frame = self.absent_test
        for i in range(pos, len(rows)):
            if times[i] >= limit:
                return MATCH
            if on_row(rows[i]) if on_row is not None else on_frame(Frame(rows, start, labels, i, self.absent,
                                                                           self.tables)):
                return NO_MATCH
        if closed or (horizon is not None and horizon >= limit):
            return MATCH
        return PENDING

    def measure(self, rows, times, start: int, labels: list, key: tuple) -> Match:
        frame = Frame(rows, start, labels, None, None, self.tables)
        values = {name: fn(frame) for name, fn in self.measures} if self.measures else {
            "rows": len(labels)}
        return Match(self.name, key, times[start], times[start + len(labels) - 1], len(labels), values,
                     tuple(labels), key_names=self.key_names)

    def next_start(self, start: int, labels: list) -> int:
        how, var = self.rule.skip
        if how == "PAST LAST ROW":
            return start + len(labels)
        if how == "TO NEXT ROW":
            return start + 1
        positions = [start + i for i, label in enumerate(labels) if label == var]
        if not positions:
            return start + 1  # the variable was not mapped in this match: the next row (as Flink)
        target = positions[0] if how == "TO FIRST" else positions[-1]
        return target if target > start else start + 1  # never the same start again (an infinite loop)

    # ---- a whole sequence ----------------------------------------------------------------------------

    def match_rows(self, rows: list, times: list, key: tuple = (), start: int = 0, closed: bool = True,
                   horizon: int | None = None) -> tuple[list[Match], int]:
        """Matches from ``start`` on, in order; returns them and where the next search starts (the first
        pending attempt, or past the end)."""
        if self.scan is not None:
            return self.scan.match_rows(rows, times, key, start, closed, horizon)
        found: list[Match] = []
        n_rows, first_row = len(rows), self.first_row
        while start < n_rows:
            if first_row is not None and not first_row(rows[start]):
                start += 1  # no match starts here: the attempt would be NO_MATCH with nothing mapped
                continue
            verdict, labels = self.attempt(rows, times, start, closed, horizon)
            if verdict == PENDING:
                break
            if verdict == MATCH:
                found.append(self.measure(rows, times, start, labels, key))
                start = self.next_start(start, labels)
            else:
                # closed (the input has ended): every time limit has run out, as on a stream whose
                # watermark passed them all, so a partial match cut short is a timeout there too
                if labels and self.rule.emit_timeouts:
                    timeout = self.measure(rows, times, start, labels, key)
                    timeout.kind = "timeout"
                    found.append(timeout)
                start += 1
        return found, start


def first_row_test(program: list[tuple], defines: dict, tables: dict):
    """``row -> truthy`` that holds for every row a match can start at, or None when every row may start one.

    The pattern's first row is mapped to one of the variables its program can reach without a row (following
    ``split`` and ``jmp``); a variable's DEFINE holds on a row only if each of its top-level AND's conditions on
    the current row alone does (an AND is true only when every side is). A row none of them passes begins no
    match: the attempt from it maps nothing and ends NO_MATCH, so it need not be made. None if a first variable
    has no such condition (no DEFINE: any row), or if the pattern can end before its first row."""
    firsts, seen, todo = [], set(), [0]
    while todo:
        pc = todo.pop()
        if pc in seen:
            continue
        seen.add(pc)
        ins = program[pc]
        if ins[0] == "var":
            if ins[1] not in firsts:
                firsts.append(ins[1])
        elif ins[0] == "split":
            todo.extend((ins[1], ins[2]))
        elif ins[0] == "jmp":
            todo.append(ins[1])
        else:  # done: an empty match
            return None
    checks = []
    for var in firsts:
        condition = defines.get(var)
        if condition is None:
            return None
        # the conditions on the row alone, as one AND (the whole DEFINE when it is one)
        on_row = [part for part in _conjuncts(condition) if compile_row_expression(part, var, tables) is not None]
        if not on_row:
            return None
        both = on_row[0]
        for part in on_row[1:]:
            both = Binary("AND", both, part)
        checks.append(compile_row_expression(both, var, tables))
    if len(checks) == 1:
        return checks[0]
    return lambda row: any(check(row) for check in checks)


def _conjuncts(node) -> list:
    """The sides of a top-level AND (nested ANDs flattened), or the node itself."""
    if isinstance(node, Binary) and node.op == "AND":
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


class WindowScan:
    """``PATTERN (S*? T)`` with S undefined (any row) and T's DEFINE made of counts that only grow with the rows:
    the first row T holds at from each start row, found without going over the window again from each start.

    T's DEFINE is an AND of ``COUNT(DISTINCT f) > n``, ``COUNT(f) > n``, ``COUNT(*) > n`` (or ``>=``, or
    ``n < COUNT(...)``) over the match's rows (no variable named: the rows from the start row to the current
    one), and of conditions on the current row alone. Such a count over rows ``s..e`` is no larger over
    ``s+1..e``, and a condition on row ``e`` alone does not depend on the start, so when T holds at no row
    before ``e`` from start ``s`` it holds at none of them from a later start either: the scan from the next
    start carries on where the last one stopped (after a match: at its last row), the counts kept as rows enter
    and leave the window, each row added and removed once, instead of a frame's count per row and start. What
    comes out is what :meth:`CompiledRule.attempt` gives from each start row, for rows in event-time order (as
    :class:`PartitionMatcher` and :func:`match_events` hold them): the preferred match (S reluctant: the first
    row T holds at before the time limit), else NO_MATCH with its partial match (timeouts) or PENDING."""

    def __init__(self, compiled: CompiledRule, s: str, t: str, parts: list[tuple]) -> None:
        self.compiled, self.s, self.t = compiled, s, t
        # (kind, field path or the row's test, op, number): kind "distinct" COUNT(DISTINCT f), "values"
        # COUNT(f), "rows" COUNT(*), "row" a condition on the current row alone (op and number None)
        self.parts = parts

    @classmethod
    def of(cls, compiled: CompiledRule) -> WindowScan | None:
        rule, program = compiled.rule, compiled.program
        if rule.absent is not None or len(program) != 5:
            return None
        split, s_var, jmp, t_var, done = program
        if not (split == ("split", 3, 1) and s_var[0] == "var" and jmp == ("jmp", 0) and t_var[0] == "var"
                and done == ("done",)):
            return None
        s, t = s_var[1], t_var[1]
        if s == t or s in rule.defines or t not in rule.defines:
            return None
        parts = []
        for node in _conjuncts(rule.defines[t]):
            part = _growing_count(node)
            if part is None:
                test = compile_row_expression(node, t, rule.tables)
                if test is None:
                    return None
                part = ("row", test, None, None)
            parts.append(part)
        if all(part[0] == "row" for part in parts):
            return None  # no count: the attempt's own scan stops at the first row T holds at anyway
        return cls(compiled, s, t, parts)

    def match_rows(self, rows: list, times: list, key: tuple, start: int, closed: bool, horizon: int | None
                   ) -> tuple[list[Match], int]:
        compiled, s_label, t_label, parts = self.compiled, self.s, self.t, self.parts
        within, emit_timeouts = compiled.within, compiled.rule.emit_timeouts
        n_rows = len(rows)
        found: list[Match] = []
        # the counts are over rows[lo:top]; from start lo, T holds at none of the rows lo..known-1
        lo = top = known = start
        tallies = self._empty()
        while lo < n_rows:
            limit = times[lo] + within if within is not None else None
            at, hit = known, False
            while at < n_rows and (limit is None or times[at] < limit):
                if top == at:
                    self._enter(tallies, rows[at])
                    top += 1
                for (kind, test, op, number), tally in zip(parts, tallies):
                    if kind == "row":
                        if not test(rows[at]):
                            break
                        continue
                    value = len(tally) - (None in tally) if kind == "distinct" else tally if kind == "values" \
                        else top - lo
                    if not (value > number if op == ">" else value >= number):
                        break
                else:
                    hit = True
                    break
                at += 1
            if hit:
                labels = [s_label] * (at - lo) + [t_label]
                found.append(compiled.measure(rows, times, lo, labels, key))
                following = compiled.next_start(lo, labels)
            else:
                if at >= n_rows and not (closed or (limit is not None and horizon is not None and horizon >= limit)):
                    break  # PENDING: a later row may still come within the time limit
                if emit_timeouts and limit is not None and at > lo:  # the partial match the time limit cut short
                    timeout = compiled.measure(rows, times, lo, [s_label] * (at - lo), key)
                    timeout.kind = "timeout"
                    found.append(timeout)
                following = lo + 1
            known = at  # after a match T is yet to be tried at its last row from the next start
            if following >= top:  # past the window: it starts anew
                tallies = self._empty()
                lo = top = known = following
            else:
                while lo < following:
                    self._leave(tallies, rows[lo])
                    lo += 1
                known = max(known, lo)
        return found, lo

    def _empty(self) -> list:
        return [{} if kind == "distinct" else 0 for kind, _test, _op, _number in self.parts]

    def _enter(self, tallies: list, row: dict) -> None:
        for i, (kind, path, _op, _number) in enumerate(self.parts):
            if kind == "distinct":
                value = _hashable(row.get(path[0]) if len(path) == 1 else get_path(row, path))
                tally = tallies[i]
                tally[value] = tally.get(value, 0) + 1
            elif kind == "values":
                tallies[i] += (row.get(path[0]) if len(path) == 1 else get_path(row, path)) is not None

    def _leave(self, tallies: list, row: dict) -> None:
        for i, (kind, path, _op, _number) in enumerate(self.parts):
            if kind == "distinct":
                value = _hashable(row.get(path[0]) if len(path) == 1 else get_path(row, path))
                tally = tallies[i]
                left = tally[value] - 1
                if left:
                    tally[value] = left
                else:
                    del tally[value]
            elif kind == "values":
                tallies[i] -= (row.get(path[0]) if len(path) == 1 else get_path(row, path)) is not None


def _growing_count(node) -> tuple | None:
    """``(kind, path, op, number)`` (see :class:`WindowScan`) of ``COUNT(DISTINCT f) > n``, ``COUNT(f) >= n``,
    ``COUNT(*) > n``, ``n < COUNT(...)``, ... over the match's rows; None for any other condition."""
    if not isinstance(node, Binary):
        return None
    op, count, number = node.op, node.left, node.right
    if op in ("<", "<="):
        op, count, number = {"<": ">", "<=": ">="}[op], node.right, node.left
    if op not in (">", ">=") or not isinstance(count, Aggregate) or not isinstance(number, Literal):
        return None
    if count.function != "COUNT" or count.var is not None or type(number.value) not in (int, float):
        return None
    if count.field is None:
        return ("rows", None, op, number.value)
    return ("distinct" if count.distinct else "values", count.field.path, op, number.value)


SAFE_NEEDLE = re.compile(r"[A-Za-z0-9_.:@ -]+")  # characters JSON never escapes


class RuleRouter:
    """Which rules an event goes to (FROM and WHERE), fast: rules whose WHERE is, or starts with,
    ``field = 'value'`` or ``field IN ('value', ...)`` are looked up by that field's value instead of evaluated
    one by one."""

    def __init__(self, rules: list[CompiledRule]) -> None:
        self.rules = rules
        self.by_value: dict[str, dict] = {}
        self.others: list[CompiledRule] = []
        needles: list[str] | None = []
        for rule in rules:
            found = _equality(rule.rule.where)
            if found is None:
                self.others.append(rule)
                needles = None
            else:
                name, values, exact = found
                for value in values:
                    self.by_value.setdefault(name, {}).setdefault(value, []).append((rule, exact))
                    if needles is not None:
                        if isinstance(value, str) and SAFE_NEEDLE.fullmatch(value):
                            needles.append(value)
                        else:
                            needles = None
        # texts one of which every event some rule wants contains (the WHERE values, when each rule has one
        # that JSON writes as it is), or None: every event must be parsed
        self.needles: tuple[str, ...] | None = tuple(sorted(set(needles))) if needles else None

    def rules_for(self, event: dict, topic: str | None = None) -> list[CompiledRule]:
        chosen = []
        for name, table in self.by_value.items():
            value = event.get(name)
            if value is None or isinstance(value, (dict, list)):
                continue
            for rule, exact in table.get(value, ()):
                if rule.rule.topic in (None, topic) and (exact or rule.accepts(event)):
                    chosen.append(rule)
        for rule in self.others:
            if rule.rule.topic in (None, topic) and rule.accepts(event):
                chosen.append(rule)
        return chosen


def _equality(where) -> tuple[str, tuple, bool] | None:
    """(field, the values it may have, whether that is the whole condition) when ``where`` is ``field = literal``
    or ``field IN (literal, ...)`` (texts and integers), or an AND whose first side is."""
    from .expressions import Binary, Field, InList, Literal

    exact = True
    node = where
    while isinstance(node, Binary) and node.op == "AND":
        node, exact = node.left, False
    if isinstance(node, Binary) and node.op == "=":
        field, literals = node.left, (node.right,)
    elif isinstance(node, InList) and not node.negated and node.items:
        field, literals = node.operand, node.items
    else:
        return None
    if (isinstance(field, Field) and field.var is None and len(field.path) == 1
            and all(isinstance(item, Literal) and isinstance(item.value, (str, int))
                    and not isinstance(item.value, bool) for item in literals)):
        return field.path[0], tuple(dict.fromkeys(item.value for item in literals)), exact
    return None


def match_events(rule: Rule | CompiledRule, events: list[dict]) -> list[Match]:
    """Every match of ``rule`` in a finished list of events (a static run): WHERE, partition, order
    by event time (ties in the order given), match."""
    compiled = rule if isinstance(rule, CompiledRule) else CompiledRule(rule)
    partitions: dict[tuple, list] = {}
    for seq, event in enumerate(events):
        if not compiled.accepts(event):
            continue
        when = compiled.time_of(event)
        if when is None:
            continue
        partitions.setdefault(compiled.key_of(event), []).append((when, seq, event))
    found: list[Match] = []
    for key, entries in partitions.items():
        entries.sort(key=lambda e: (e[0], e[1]))
        rows = [e[2] for e in entries]
        times = [e[0] for e in entries]
        found.extend(compiled.match_rows(rows, times, key)[0])
    return found


class PartitionMatcher:
    """One rule over one partition of a stream, fed as events arrive, in any order.

    Events wait in a buffer until the watermark passes them, then join the released rows in event-time
    order (ties broken by the order key given, e.g. topic partition and offset); the matcher runs over
    the released rows. Events at or behind the watermark already passed are late: dropped and counted
    (their place in the order is gone). Rows no pending attempt can reach are let go, so the state is
    bounded by the time limit. The whole state is plain data (``to_state`` / ``from_state``).
    """

    __slots__ = ("compiled", "key", "buffer", "rows", "texts", "times", "start", "watermark", "late", "objects")

    def __init__(self, compiled: CompiledRule, key: tuple = ()) -> None:
        self.compiled = compiled
        self.key = key
        self.buffer: list[tuple] = []  # (time, order, event), not yet released; event a dict or its JSON text
        self.rows: list[dict] = []
        self.texts: list[str | None] = []  # each row's JSON text when it came as text (written out as it came)
        self.times: list[int] = []
        self.start = 0  # where the next attempt starts, in rows
        self.watermark = None  # the last watermark released up to
        self.late = 0
        self.objects = False  # whether some event came as an object (not as its JSON text)

    def add(self, event: dict, when: int, order=0) -> bool:
        """Buffer an event; False (and counted) if it is late."""
        if self.watermark is not None and when <= self.watermark:
            self.late += 1
            return False
        if type(event) is not str:
            self.objects = True
        self.buffer.append((when, order, event))
        return True

    def add_text(self, text: str, when: int, order=0) -> bool:
        """``add`` for an event given as its JSON text (an object), parsed only once it is released: events
        that wait for the watermark cost no parsing while they wait, nor when written out."""
        return self.add(text, when, order)

    def advance(self, watermark: int | None, closed: bool = False) -> list[Match]:
        """Release buffered events up to ``watermark`` (all of them if ``closed``) and match."""
        if closed:
            ready, self.buffer = self.buffer, []
        elif watermark is None:
            ready = []
        elif self.buffer and max(map(_TIME, self.buffer)) <= watermark:  # all of it (what the Spark step hands over)
            ready, self.buffer = self.buffer, []
        else:
            ready = [e for e in self.buffer if e[0] <= watermark]
            if ready:
                self.buffer = [e for e in self.buffer if e[0] > watermark]
        if watermark is not None and (self.watermark is None or watermark > self.watermark):
            self.watermark = watermark
        horizon = None if self.watermark is None else self.watermark + 1
        if not ready and not closed:
            # no new row: a pending attempt's verdict changes only once the horizon reaches its time limit
            within, start = self.compiled.within, self.start
            if start >= len(self.times) or within is None or horizon is None or horizon < self.times[start] + within:
                return []
        ready.sort(key=_TIME_ORDER)
        rows, texts = self.rows, self.texts
        if not self.objects:  # every event came as its JSON text
            added = [e[2] for e in ready]
            texts.extend(added)
            rows.extend(map(orjson.loads, added))
        else:
            for _when, _order, event in ready:
                if type(event) is str:
                    texts.append(event)
                    event = orjson.loads(event)
                else:
                    texts.append(None)
                rows.append(event)
        self.times.extend(map(_TIME, ready))
        found, self.start = self.compiled.match_rows(self.rows, self.times, self.key, self.start, closed, horizon)
        self._let_go()
        return found

    def _let_go(self) -> None:
        keep_from = max(0, self.start - 1)  # one row before the next start, for PREV
        if keep_from > 64 and keep_from * 2 > len(self.rows):
            del self.rows[:keep_from]
            del self.texts[:keep_from]
            del self.times[:keep_from]
            self.start -= keep_from

    @property
    def idle(self) -> bool:
        """Nothing buffered and no attempt pending: the state can be dropped."""
        return not self.buffer and self.start >= len(self.rows)

    def next_deadline(self) -> int | None:
        """The earliest watermark at which ``advance`` can make progress: the oldest buffered event, or the
        time limit of the pending attempt."""
        candidates = [min(map(_TIME, self.buffer))] if self.buffer else []
        if self.start < len(self.rows) and self.compiled.within is not None:
            candidates.append(self.times[self.start] + self.compiled.within - 1)
        return min(candidates) if candidates else None

    def to_state(self) -> dict[str, Any]:
        base = max(0, self.start - 1)
        buffer = [[when, order, orjson.loads(event) if type(event) is str else event]
                  for when, order, event in self.buffer]
        return {"buffer": buffer, "rows": self.rows[base:], "times": self.times[base:],
                "start": self.start - base, "watermark": self.watermark, "late": self.late}

    @classmethod
    def from_state(cls, compiled: CompiledRule, key: tuple, state: dict[str, Any]) -> PartitionMatcher:
        matcher = cls(compiled, key)
        matcher.buffer = [tuple(e) for e in state["buffer"]]
        matcher.rows, matcher.times = state["rows"], state["times"]
        matcher.texts = [None] * len(matcher.rows)
        matcher.objects = True
        matcher.start, matcher.watermark, matcher.late = state["start"], state["watermark"], state["late"]
        return matcher

    # ---- the compact state: numbers in a header, each event as its JSON text, one a line -------------

    def to_compact(self, lines: list[str]) -> list:
        """The state as ``to_state`` holds it, for a stream's state store, cheaply: appends the JSON text of
        the rows kept and of the buffered events to ``lines`` (as they came, when they came as text) and
        returns the rest, plain numbers: ``[start, watermark, late, row times, buffer times, buffer orders]``."""
        base = max(0, self.start - 1)
        if not self.objects:  # every event came as text: written as it came
            lines.extend(self.texts[base:])
            lines.extend([e[2] for e in self.buffer])
        else:
            rows, texts = self.rows, self.texts
            for i in range(base, len(rows)):
                text = texts[i]
                lines.append(text if text is not None else orjson.dumps(rows[i]).decode())
            for _when, _order, event in self.buffer:
                lines.append(event if type(event) is str else orjson.dumps(event).decode())
        return [self.start - base, self.watermark, self.late, self.times[base:], [e[0] for e in self.buffer],
                [e[1] for e in self.buffer]]

    @classmethod
    def from_compact(cls, compiled: CompiledRule, key: tuple, numbers: list, lines: list[str], at: int
                     ) -> tuple[PartitionMatcher, int]:
        """The matcher ``to_compact`` wrote, its texts read from ``lines[at:]``; and where the next one's begin.
        The rows are parsed now (a pending attempt reads them), the buffered events when they are released."""
        start, watermark, late, times, buffer_times, buffer_orders = numbers
        matcher = cls(compiled, key)
        end = at + len(times)
        matcher.texts = lines[at:end]
        matcher.rows = [orjson.loads(text) for text in matcher.texts]
        matcher.times = times
        matcher.buffer = list(zip(buffer_times, buffer_orders, lines[end:end + len(buffer_times)]))
        matcher.start, matcher.watermark, matcher.late = start, watermark, late
        return matcher, end + len(buffer_times)
