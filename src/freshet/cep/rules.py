"""Rules: SQL's MATCH_RECOGNIZE, as a text a user can read, store and change, plus a time limit and absence.

::

    RULE card_in_two_countries
    FROM payments
    PARTITION BY card
    ORDER BY event_time
    MEASURES A.country AS first_country, B.country AS second_country, B.event_time AS seen_at
    PATTERN (A X*? B)
    DEFINE B AS B.country <> A.country
    WITHIN 1 HOUR
    AFTER MATCH SKIP PAST LAST ROW

Clauses (any order; RULE and PATTERN required):

- ``RULE name``; ``FROM topic`` (what the rule reads; optional);
- ``WHERE condition``: only events that satisfy it reach the pattern (a pre-filter, as Esper's filters);
- ``PARTITION BY field, ...`` (default: one partition); ``ORDER BY field`` (the event time: epoch
  milliseconds or ISO 8601; default ``event_time``);
- ``PATTERN (...)``: variables, concatenation (strict contiguity: the next row of the partition),
  ``|``, groups, quantifiers ``* + ? {n} {n,} {n,m} {,m}``, each greedy or, with a trailing ``?``,
  reluctant. A variable without a DEFINE matches any row, so ``A X*? B`` is relaxed contiguity
  (Flink's followedBy: the first B after A). ``PATTERN (...) NOT FOLLOWED BY V`` is absence: the
  match holds only if no row satisfying V follows before the WITHIN limit runs out;
- ``DEFINE V AS condition, ...``; ``MEASURES expression AS name, ...`` (default: the rows' count and
  the match's first and last time);
- ``WITHIN n unit``: every row of a match lies less than that after its first row;
- ``AFTER MATCH SKIP PAST LAST ROW`` (default) | ``TO NEXT ROW`` | ``TO FIRST V`` | ``TO LAST V``;
- ``EMIT TIMEOUTS``: partial matches that the time limit ended go to the side output;
- ``TABLE name ('key' = 'value', ...)``: a lookup table for ``LOOKUP(name, key)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .expressions import (
    ExpressionParser, Field, Literal, RuleSyntaxError, Token, TokenStream, tokenize, variables_used,
)

CLAUSES = ("RULE", "FROM", "WHERE", "PARTITION", "ORDER", "MEASURES", "PATTERN", "DEFINE", "WITHIN",
           "AFTER", "EMIT", "TABLE", "ONE")
UNITS_MS = {"MILLISECOND": 1, "SECOND": 1000, "MINUTE": 60_000, "HOUR": 3_600_000, "DAY": 86_400_000}
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
SKIPS = ("PAST LAST ROW", "TO NEXT ROW", "TO FIRST", "TO LAST")


# ---- the pattern tree -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Seq:
    items: tuple


@dataclass(frozen=True)
class Alt:
    options: tuple


@dataclass(frozen=True)
class Repeat:
    node: Any
    min: int
    max: int | None  # None: unbounded
    greedy: bool = True


def pattern_text(node) -> str:
    """The pattern written back (normalised)."""
    if isinstance(node, Var):
        return node.name
    if isinstance(node, Seq):
        return " ".join(pattern_text(i) for i in node.items)
    if isinstance(node, Alt):
        return "(" + " | ".join(pattern_text(o) for o in node.options) + ")"
    inner = pattern_text(node.node)
    if not isinstance(node.node, Var):
        inner = inner if inner.startswith("(") and isinstance(node.node, Alt) else f"({inner})"
    q = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((node.min, node.max))
    if q is None:
        q = "{%d}" % node.min if node.min == node.max else "{%d,%s}" % (node.min, "" if node.max is None else node.max)
    return inner + q + ("" if node.greedy else "?")


def can_be_empty(node) -> bool:
    if isinstance(node, Var):
        return False
    if isinstance(node, Seq):
        return all(can_be_empty(i) for i in node.items)
    if isinstance(node, Alt):
        return any(can_be_empty(o) for o in node.options)
    return node.min == 0 or can_be_empty(node.node)


def pattern_variables(node) -> list[str]:
    found: list[str] = []

    def walk(n) -> None:
        if isinstance(n, Var):
            if n.name not in found:
                found.append(n.name)
        elif isinstance(n, Seq):
            for i in n.items:
                walk(i)
        elif isinstance(n, Alt):
            for o in n.options:
                walk(o)
        else:
            walk(n.node)

    walk(node)
    return found


class PatternParser:
    """``alternation := sequence ('|' sequence)*``; ``sequence := term+``; ``term := primary quantifier?``."""

    def __init__(self, stream: TokenStream) -> None:
        self.s = stream

    def alternation(self):
        options = [self.sequence()]
        while self.s.accept("|"):
            options.append(self.sequence())
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def sequence(self):
        items = []
        while not (self.s.at("|", ")") or self.s.peek.kind == "end"):
            items.append(self.term())
        if not items:
            self.s.fail("expected a pattern variable or group")
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def term(self):
        token = self.s.peek
        if self.s.accept("("):
            node = self.alternation()
            self.s.expect(")")
        elif token.kind in ("name", "keyword"):
            self.s.next()
            node = Var(token.text)
        else:
            self.s.fail("expected a pattern variable or group")
        while True:
            if self.s.at("*", "+", "?"):
                q = self.s.next().text
                low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[q]
            elif self.s.at("{"):
                self.s.next()
                low, high = self.bounds()
            else:
                return node
            greedy = not self.s.accept("?")
            node = Repeat(node, low, high, greedy)

    def bounds(self) -> tuple[int, int | None]:
        def number() -> int | None:
            token = self.s.peek
            if token.kind == "number" and token.text.isdigit():
                self.s.next()
                return int(token.text)
            return None

        low = number()
        if self.s.accept("}"):
            if low is None:
                self.s.fail("a quantifier {n} needs a number")
            return low, low
        self.s.expect(",")
        high = number()
        self.s.expect("}")
        low = 0 if low is None else low
        if high is not None and high < low:
            raise RuleSyntaxError(f"quantifier {{{low},{high}}}: the upper bound is below the lower")
        if high == 0:
            raise RuleSyntaxError("quantifier {0}/{,0} matches nothing; leave the variable out")
        return low, high


# ---- the rule -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    name: str
    pattern: Any
    text: str = ""
    topic: str | None = None
    where: Any = None
    partition_by: tuple[tuple[str, ...], ...] = ()
    order_by: tuple[str, ...] = ("event_time",)
    defines: dict = field(default_factory=dict)  # variable -> condition
    measures: tuple = ()  # ((name, expression), ...)
    within_ms: int | None = None
    skip: tuple[str, str | None] = ("PAST LAST ROW", None)
    absent: str | None = None  # NOT FOLLOWED BY this variable
    emit_timeouts: bool = False
    tables: dict = field(default_factory=dict)

    @property
    def variables(self) -> list[str]:
        found = pattern_variables(self.pattern)
        return found + ([self.absent] if self.absent and self.absent not in found else [])

    def describe(self) -> str:
        parts = [pattern_text(self.pattern)]
        if self.absent:
            parts.append(f"NOT FOLLOWED BY {self.absent}")
        if self.within_ms:
            parts.append(f"WITHIN {format_duration(self.within_ms)}")
        return " ".join(parts)


def format_duration(ms: int) -> str:
    for unit in ("DAY", "HOUR", "MINUTE", "SECOND"):
        size = UNITS_MS[unit]
        if ms % size == 0:
            n = ms // size
            return f"{n} {unit}{'S' if n != 1 else ''}"
    return f"{ms} MILLISECONDS"


def _split_clauses(tokens: list[Token]) -> list[tuple[str, list[Token]]]:
    clauses: list[tuple[str, list[Token]]] = []
    depth = 0
    for i, token in enumerate(tokens[:-1]):
        previous = tokens[i - 1].text if i else ""
        starts = (depth == 0 and token.kind in ("name", "keyword") and token.text.upper() in CLAUSES
                  and previous != ".")
        if starts and clauses and clauses[-1][0] in ("RULE", "FROM") and clauses[-1][1]:
            last = tokens[i - 1]
            if token.pos == last.pos + len(last.text):  # a name like brute-rule-2 is one word
                starts = False
        if starts:
            clauses.append((token.text.upper(), []))
            continue
        if not clauses:
            raise RuleSyntaxError(f"a rule starts with RULE name, found {token.text!r} at position {token.pos}")
        if token.text in ("(", "{"):
            depth += 1
        elif token.text in (")", "}"):
            depth -= 1
        clauses[-1][1].append(token)
    return clauses


def parse_rule(text: str) -> Rule:
    """Parse a rule's text; RuleSyntaxError says what is wrong and where."""
    if not text.strip():
        raise RuleSyntaxError("the rule is empty")
    tokens = tokenize(text)
    clauses = _split_clauses(tokens)
    seen: dict[str, list[Token]] = {}
    for name, body in clauses:
        if name in seen:
            raise RuleSyntaxError(f"{name} given twice")
        seen[name] = body
    if "RULE" not in seen:
        raise RuleSyntaxError("a rule needs a name: RULE name")
    if "PATTERN" not in seen:
        raise RuleSyntaxError("a rule needs a PATTERN (...)")

    def stream(clause: str) -> TokenStream:
        body = seen[clause]
        end = Token("end", "", body[-1].pos + len(body[-1].text) if body else 0)
        return TokenStream([*body, end], text)

    def done(s: TokenStream, clause: str) -> None:
        if s.peek.kind != "end":
            s.fail(f"unexpected text in {clause}")

    def raw(clause: str) -> str:
        body = seen[clause]
        if not body:
            raise RuleSyntaxError(f"{clause} needs a value")
        return text[body[0].pos:body[-1].pos + len(body[-1].text)].strip()

    name = raw("RULE")
    if not NAME.fullmatch(name):
        raise RuleSyntaxError(f"rule name {name!r}: letters, digits, '_', '-' and '.' only")
    topic = None
    if "FROM" in seen:
        topic = raw("FROM")
        if not NAME.fullmatch(topic):
            raise RuleSyntaxError(f"FROM {topic!r} is not a topic name")

    # the pattern first: its variables decide what A.x means everywhere else
    s = stream("PATTERN")
    s.expect("(")
    pattern = PatternParser(s).alternation()
    s.expect(")")
    absent = None
    if s.accept("NOT"):
        follows = s.next()
        if follows.text.upper() != "FOLLOWED":
            s.i -= 1
            s.fail("expected NOT FOLLOWED BY variable")
        if s.next().text.upper() != "BY":
            s.i -= 1
            s.fail("expected NOT FOLLOWED BY variable")
        token = s.next()
        if token.kind not in ("name", "keyword"):
            s.i -= 1
            s.fail("expected the absent variable")
        absent = token.text
    done(s, "PATTERN")
    if can_be_empty(pattern):
        raise RuleSyntaxError("the pattern can match no rows at all; make at least one variable required")
    _check_loops(pattern)
    variables = frozenset(pattern_variables(pattern) + ([absent] if absent else []))
    if absent and absent in pattern_variables(pattern):
        raise RuleSyntaxError(f"{absent} is both in the pattern and NOT FOLLOWED BY; use a variable of its own")

    def expression(s: TokenStream):
        return ExpressionParser(s, variables).expression()

    where = None
    if "WHERE" in seen:
        s = stream("WHERE")
        where = ExpressionParser(s, frozenset()).expression()
        done(s, "WHERE")

    def field_list(clause: str) -> tuple[tuple[str, ...], ...]:
        s = stream(clause)
        s.expect("BY")
        fields = []
        while True:
            node = ExpressionParser(s, frozenset()).primary()
            if not isinstance(node, Field):
                s.fail(f"{clause} BY takes field names")
            fields.append(node.path)
            if not s.accept(","):
                break
        done(s, clause)
        return tuple(fields)

    partition_by = field_list("PARTITION") if "PARTITION" in seen else ()
    order_by = ("event_time",)
    if "ORDER" in seen:
        order = field_list("ORDER")
        if len(order) != 1:
            raise RuleSyntaxError("ORDER BY takes the one event-time field")
        order_by = order[0]

    defines: dict = {}
    if "DEFINE" in seen:
        s = stream("DEFINE")
        while True:
            token = s.next()
            if token.text not in variables:
                s.i -= 1
                s.fail("DEFINE names a variable of the pattern")
            if token.text in defines:
                raise RuleSyntaxError(f"{token.text} defined twice")
            s.expect("AS")
            defines[token.text] = expression(s)
            if not s.accept(","):
                break
        done(s, "DEFINE")
    if absent and absent not in defines:
        raise RuleSyntaxError(f"the absent variable {absent} needs a DEFINE (it would match any row)")

    measures: list = []
    if "MEASURES" in seen:
        s = stream("MEASURES")
        while True:
            node = expression(s)
            s.expect("AS")
            token = s.next()
            if token.kind not in ("name", "keyword"):
                s.i -= 1
                s.fail("expected the measure's name after AS")
            measures.append((token.text, node))
            if not s.accept(","):
                break
        done(s, "MEASURES")
        names = [m[0] for m in measures]
        if len(set(names)) != len(names):
            raise RuleSyntaxError("two measures have the same name")

    within_ms = None
    if "WITHIN" in seen:
        within_ms = _duration(stream("WITHIN"))
    if absent and within_ms is None:
        raise RuleSyntaxError("NOT FOLLOWED BY needs a time limit: WITHIN n MINUTES")

    skip: tuple[str, str | None] = ("PAST LAST ROW", None)
    if "AFTER" in seen:
        words = raw("AFTER").upper().split()
        phrase = " ".join(words)
        if phrase in ("MATCH SKIP PAST LAST ROW", "MATCH SKIP TO NEXT ROW"):
            skip = (phrase[len("MATCH SKIP "):], None)
        elif len(words) == 5 and words[:4] in (["MATCH", "SKIP", "TO", "FIRST"], ["MATCH", "SKIP", "TO", "LAST"]):
            target = raw("AFTER").split()[4]
            if target not in variables or target == absent:
                raise RuleSyntaxError(f"AFTER MATCH SKIP {words[3]} {target}: not a variable of the pattern")
            skip = (f"TO {words[3]}", target)
        else:
            raise RuleSyntaxError("AFTER MATCH SKIP PAST LAST ROW | TO NEXT ROW | TO FIRST var | TO LAST var")
    if "ONE" in seen and " ".join(raw("ONE").upper().split()) != "ROW PER MATCH":
        raise RuleSyntaxError("only ONE ROW PER MATCH is supported")
    emit_timeouts = False
    if "EMIT" in seen:
        if raw("EMIT").upper() != "TIMEOUTS":
            raise RuleSyntaxError("EMIT TIMEOUTS is the only EMIT clause")
        if within_ms is None:
            raise RuleSyntaxError("EMIT TIMEOUTS needs a time limit: WITHIN n MINUTES")
        emit_timeouts = True
    tables = {}
    if "TABLE" in seen:
        tables = _table(stream("TABLE"))
    for condition in [where, *defines.values(), *(m[1] for m in measures)]:
        if condition is not None:
            unknown = variables_used(condition) - variables
            if unknown:
                raise RuleSyntaxError(f"unknown variable {sorted(unknown)[0]}")
    return Rule(name=name, pattern=pattern, text=text.strip(), topic=topic, where=where,
                partition_by=partition_by, order_by=order_by, defines=defines, measures=tuple(measures),
                within_ms=within_ms, skip=skip, absent=absent, emit_timeouts=emit_timeouts, tables=tables)


def _check_loops(node) -> None:
    if isinstance(node, Repeat):
        if (node.max is None or node.max > 1) and can_be_empty(node.node):
            raise RuleSyntaxError(f"{pattern_text(node)}: a repeated group that can match no rows loops forever; "
                                  "make something in it required")
        _check_loops(node.node)
    elif isinstance(node, Seq):
        for i in node.items:
            _check_loops(i)
    elif isinstance(node, Alt):
        for o in node.options:
            _check_loops(o)


def _duration(s: TokenStream) -> int:
    quoted = s.accept("INTERVAL")
    token = s.next()
    if token.kind == "string" and quoted:
        amount_text = token.text[1:-1]
    elif token.kind == "number":
        amount_text = token.text
    else:
        s.i -= 1
        s.fail("WITHIN takes a duration like 2 MINUTES")
    unit = s.next().text.upper().rstrip("S")
    if unit not in UNITS_MS:
        s.i -= 1
        s.fail("expected a time unit (MILLISECONDS, SECONDS, MINUTES, HOURS, DAYS)")
    if s.peek.kind != "end":
        s.fail("unexpected text in WITHIN")
    try:
        amount = float(amount_text)
    except ValueError:
        raise RuleSyntaxError(f"WITHIN {amount_text!r} is not a number") from None
    ms = int(round(amount * UNITS_MS[unit]))
    if ms <= 0:
        raise RuleSyntaxError("WITHIN must be a positive duration")
    return ms


def _table(s: TokenStream) -> dict:
    token = s.next()
    if token.kind not in ("name", "keyword"):
        s.i -= 1
        s.fail("TABLE name ('key' = 'value', ...)")
    name, entries = token.text, {}
    s.expect("(")
    while True:
        key = ExpressionParser(s, frozenset()).primary()
        s.expect("=")
        value = ExpressionParser(s, frozenset()).primary()
        if not (isinstance(key, Literal) and isinstance(value, Literal)):
            s.fail("table entries are 'key' = 'value'")
        entries[key.value] = value.value
        if not s.accept(","):
            break
    s.expect(")")
    if s.peek.kind != "end":
        s.fail("unexpected text in TABLE")
    return {name: entries}
