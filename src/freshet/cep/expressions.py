"""The expression language of rules: what goes in WHERE, DEFINE and MEASURES.

SQL's, as MATCH_RECOGNIZE uses it::

    A.kind = 'login_failed' AND B.amount > 2 * AVG(A.amount)
    B.country <> A.country
    COUNT(DISTINCT event_name) > 5
    CASE WHEN record_type IN ('MOC', 'SMS-MO') THEN 'outgoing' ELSE 'incoming' END

Names are fields of the event (JSON objects; ``a.b`` reaches into nested objects when ``a`` is not a
pattern variable). ``A.field`` is the field of the last row mapped to variable ``A`` (in A's own
DEFINE: the row being tested); an unqualified field is the current row's. Aggregates (COUNT, SUM,
AVG, MIN, MAX, FIRST, LAST) run over the rows mapped to their variable so far, the current row
included, or over every row of the match when unqualified. ``PREV(field)`` is the row before.
NULL (a missing field) compares as unknown: a condition that is not TRUE does not hold.

An expression compiles to a Python closure of one argument, the :class:`Frame` it is evaluated in.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class RuleSyntaxError(ValueError):
    """A rule or query that cannot be parsed; the message says where."""


# ---- tokens -------------------------------------------------------------------------------------

TOKEN = re.compile(r"""
    (?P<ws>\s+|--[^\n]*)
  | (?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
  | (?P<string>'(?:[^']|'')*')
  | (?P<qname>"(?:[^"]|"")+")
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op><=|>=|<>|!=|\|\||[-+*/%=<>(),.\[\]{}|?!:;])
""", re.VERBOSE)

KEYWORDS = {
    "AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE", "CASE", "WHEN", "THEN", "ELSE", "END", "LIKE",
    "DISTINCT", "AS", "BETWEEN",
}


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # number, string, name, keyword, op, end
    text: str
    pos: int


def tokenize(text: str) -> list[Token]:
    tokens, pos = [], 0
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if m is None:
            raise RuleSyntaxError(f"unexpected {text[pos]!r} at position {pos}")
        kind = m.lastgroup
        if kind != "ws":
            value = m.group()
            if kind == "name" and value.upper() in KEYWORDS:
                tokens.append(Token("keyword", value.upper(), pos))
            elif kind == "qname":
                tokens.append(Token("name", value[1:-1].replace('""', '"'), pos))
            else:
                tokens.append(Token(kind, value, pos))
        pos = m.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


class TokenStream:
    def __init__(self, tokens: list[Token], source: str) -> None:
        self.tokens, self.i, self.source = tokens, 0, source

    @property
    def peek(self) -> Token:
        return self.tokens[self.i]

    def next(self) -> Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def at(self, *texts: str) -> bool:
        token = self.peek
        return token.kind in ("keyword", "op", "name") and token.text.upper() in texts

    def accept(self, *texts: str) -> Token | None:
        return self.next() if self.at(*texts) else None

    def expect(self, text: str) -> Token:
        if not self.at(text):
            self.fail(f"expected {text}")
        return self.next()

    def fail(self, message: str):
        token = self.peek
        found = "the end" if token.kind == "end" else repr(token.text)
        raise RuleSyntaxError(f"{message}, found {found} at position {token.pos}")


# ---- the tree -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Literal:
    value: Any


@dataclass(frozen=True)
class Field:
    var: str | None  # pattern variable, or None: the current row
    path: tuple[str, ...]  # field names, nested


@dataclass(frozen=True)
class Prev:
    field: Field
    steps: int


@dataclass(frozen=True)
class Aggregate:
    function: str  # COUNT SUM AVG MIN MAX FIRST LAST
    var: str | None  # rows of this variable, or None: all rows of the match
    field: Field | None  # None: COUNT(*) / COUNT(A.*)
    distinct: bool = False


@dataclass(frozen=True)
class Unary:
    op: str  # NOT, -
    operand: Any


@dataclass(frozen=True)
class Binary:
    op: str
    left: Any
    right: Any


@dataclass(frozen=True)
class InList:
    operand: Any
    items: tuple
    negated: bool


@dataclass(frozen=True)
class IsNull:
    operand: Any
    negated: bool


@dataclass(frozen=True)
class Like:
    operand: Any
    pattern: str
    negated: bool


@dataclass(frozen=True)
class Case:
    whens: tuple  # ((condition, result), ...)
    otherwise: Any


@dataclass(frozen=True)
class Call:
    function: str  # LOWER UPPER LENGTH ABS COALESCE LOOKUP
    args: tuple


AGGREGATES = {"COUNT", "SUM", "AVG", "MIN", "MAX", "FIRST", "LAST"}
SCALARS = {"LOWER": 1, "UPPER": 1, "LENGTH": 1, "ABS": 1, "COALESCE": -1, "LOOKUP": 2}


# ---- parser (precedence climbing) ---------------------------------------------------------------

def parse_expression(text: str, variables: frozenset[str] = frozenset()) -> Any:
    """Parse one expression; ``variables`` are the pattern variables (``A.x`` means A's row)."""
    stream = TokenStream(tokenize(text), text)
    node = ExpressionParser(stream, variables).expression()
    if stream.peek.kind != "end":
        stream.fail("unexpected text after the expression")
    return node


class ExpressionParser:
    def __init__(self, stream: TokenStream, variables: frozenset[str]) -> None:
        self.s = stream
        self.variables = variables

    def expression(self):
        return self.disjunction()

    def disjunction(self):
        node = self.conjunction()
        while self.s.accept("OR"):
            node = Binary("OR", node, self.conjunction())
        return node

    def conjunction(self):
        node = self.negation()
        while self.s.accept("AND"):
            node = Binary("AND", node, self.negation())
        return node

    def negation(self):
        if self.s.accept("NOT"):
            return Unary("NOT", self.negation())
        return self.comparison()

    def comparison(self):
        node = self.additive()
        while True:
            if self.s.at("=", "<>", "!=", "<", "<=", ">", ">="):
                op = self.s.next().text
                node = Binary("<>" if op == "!=" else op, node, self.additive())
            elif self.s.at("IS"):
                self.s.next()
                negated = bool(self.s.accept("NOT"))
                self.s.expect("NULL")
                node = IsNull(node, negated)
            elif self.s.at("NOT", "IN", "LIKE", "BETWEEN"):
                negated = bool(self.s.accept("NOT"))
                if self.s.accept("IN"):
                    self.s.expect("(")
                    items = [self.expression()]
                    while self.s.accept(","):
                        items.append(self.expression())
                    self.s.expect(")")
                    node = InList(node, tuple(items), negated)
                elif self.s.accept("LIKE"):
                    token = self.s.next()
                    if token.kind != "string":
                        self.s.i -= 1
                        self.s.fail("LIKE takes a string pattern")
                    node = Like(node, token.text[1:-1].replace("''", "'"), negated)
                elif self.s.accept("BETWEEN"):
                    low = self.additive()
                    self.s.expect("AND")
                    high = self.additive()
                    between = Binary("AND", Binary(">=", node, low), Binary("<=", node, high))
                    node = Unary("NOT", between) if negated else between
                else:
                    self.s.fail("expected IN, LIKE or BETWEEN after NOT")
            else:
                return node

    def additive(self):
        node = self.multiplicative()
        while self.s.at("+", "-", "||"):
            node = Binary(self.s.next().text, node, self.multiplicative())
        return node

    def multiplicative(self):
        node = self.unary()
        while self.s.at("*", "/", "%"):
            node = Binary(self.s.next().text, node, self.unary())
        return node

    def unary(self):
        if self.s.accept("-"):
            return Unary("-", self.unary())
        return self.primary()

    def primary(self):
        token = self.s.peek
        if token.kind == "number":
            self.s.next()
            return Literal(float(token.text) if any(c in token.text for c in ".eE") else int(token.text))
        if token.kind == "string":
            self.s.next()
            return Literal(token.text[1:-1].replace("''", "'"))
        if token.kind == "keyword":
            if token.text in ("TRUE", "FALSE", "NULL"):
                self.s.next()
                return Literal({"TRUE": True, "FALSE": False, "NULL": None}[token.text])
            if token.text == "CASE":
                return self.case()
            self.s.fail("expected a value")
        if self.s.accept("("):
            node = self.expression()
            self.s.expect(")")
            return node
        if token.kind == "name":
            self.s.next()
            name = token.text
            if self.s.at("(") and name.upper() in AGGREGATES | set(SCALARS) | {"PREV"}:
                return self.call(name.upper())
            return self.field_from(name)
        self.s.fail("expected a value")

    def field_from(self, first: str) -> Field:
        path = [first]
        while self.s.at("."):
            self.s.next()
            token = self.s.next()
            if token.kind not in ("name", "keyword"):
                self.s.i -= 1
                self.s.fail("expected a field name after '.'")
            path.append(token.text)
        if path[0] in self.variables and len(path) > 1:
            return Field(path[0], tuple(path[1:]))
        return Field(None, tuple(path))

    def call(self, function: str):
        self.s.expect("(")
        if function in AGGREGATES:
            distinct = bool(self.s.accept("DISTINCT"))
            if self.s.accept("*"):
                self.s.expect(")")
                if function != "COUNT":
                    self.s.fail(f"{function}(*) is not a thing; only COUNT(*)")
                return Aggregate("COUNT", None, None)
            token = self.s.peek
            if (token.kind == "name" and token.text in self.variables
                    and self.s.tokens[self.s.i + 1].text == "." and self.s.tokens[self.s.i + 2].text == "*"):
                self.s.i += 3
                self.s.expect(")")
                if function != "COUNT":
                    self.s.fail(f"{function}({token.text}.*) is not a thing; only COUNT")
                return Aggregate("COUNT", token.text, None)
            argument = self.expression()
            self.s.expect(")")
            if not isinstance(argument, Field):
                self.s.i -= 1
                self.s.fail(f"{function} takes a field (like A.price)")
            return Aggregate(function, argument.var, Field(None, argument.path), distinct)
        if function == "PREV":
            argument = self.expression()
            steps = 1
            if self.s.accept(","):
                token = self.s.next()
                if token.kind != "number" or not token.text.isdigit():
                    self.s.i -= 1
                    self.s.fail("PREV takes a whole number of rows")
                steps = int(token.text)
            self.s.expect(")")
            if not isinstance(argument, Field):
                self.s.fail("PREV takes a field")
            return Prev(argument, steps)
        args = []
        if not self.s.at(")"):
            args.append(self.expression())
            while self.s.accept(","):
                args.append(self.expression())
        self.s.expect(")")
        arity = SCALARS[function]
        if arity >= 0 and len(args) != arity:
            self.s.i -= 1
            self.s.fail(f"{function} takes {arity} argument{'s' if arity != 1 else ''}")
        if function == "LOOKUP" and not (isinstance(args[0], Field) and len(args[0].path) == 1):
            self.s.fail("LOOKUP's first argument names a table")
        return Call(function, tuple(args))

    def case(self):
        self.s.expect("CASE")
        whens = []
        while self.s.accept("WHEN"):
            condition = self.expression()
            self.s.expect("THEN")
            whens.append((condition, self.expression()))
        if not whens:
            self.s.fail("CASE needs at least one WHEN")
        otherwise = Literal(None)
        if self.s.accept("ELSE"):
            otherwise = self.expression()
        self.s.expect("END")
        return Case(tuple(whens), otherwise)


def variables_used(node) -> set[str]:
    """The pattern variables an expression refers to."""
    found: set[str] = set()

    def walk(n) -> None:
        if isinstance(n, Field) and n.var:
            found.add(n.var)
        elif isinstance(n, Aggregate) and n.var:
            found.add(n.var)
        for child in _children(n):
            walk(child)

    walk(node)
    return found


def fields_used(node) -> set[str]:
    """The top-level event fields an expression reads (``a`` of ``a.b``, of ``A.a``, of ``SUM(A.a)``)."""
    found: set[str] = set()

    def walk(n) -> None:
        if isinstance(n, Field):
            found.add(n.path[0])
        elif isinstance(n, Aggregate) and n.field is not None:
            found.add(n.field.path[0])
        for child in _children(n):
            walk(child)

    walk(node)
    return found


def _children(n) -> list:
    if isinstance(n, Unary):
        return [n.operand]
    if isinstance(n, Binary):
        return [n.left, n.right]
    if isinstance(n, InList):
        return [n.operand, *n.items]
    if isinstance(n, (IsNull, Like)):
        return [n.operand]
    if isinstance(n, Case):
        return [x for pair in n.whens for x in pair] + [n.otherwise]
    if isinstance(n, Call):
        return list(n.args)
    if isinstance(n, Prev):
        return [n.field]
    return []


# ---- evaluation -----------------------------------------------------------------------------------

class Frame:
    """Where an expression is evaluated: the partition's rows, the match so far and the current row.

    ``rows[start + i]`` is mapped to ``labels[i]``; ``current`` is the index of the row being tested
    (its label is ``var``, not yet in ``labels``), or None when measures are computed over a finished
    match. ``tables`` are the rule's lookup tables. ``memo``: a dict one attempt (one start row, its rows
    unchanged) shares among its frames, where aggregates keep what they can extend by a row.
    """

    __slots__ = ("rows", "start", "labels", "current", "var", "tables", "memo")

    def __init__(self, rows, start: int, labels: list, current: int | None, var: str | None,
                 tables: dict | None = None, memo: dict | None = None) -> None:
        self.rows, self.start, self.labels, self.current, self.var = rows, start, labels, current, var
        self.tables = tables or {}
        self.memo = memo

    def row(self) -> dict | None:
        """The current row, or the match's last row."""
        if self.current is not None:
            return self.rows[self.current]
        return self.rows[self.start + len(self.labels) - 1] if self.labels else None

    def last_of(self, var: str) -> dict | None:
        if self.current is not None and var == self.var:
            return self.rows[self.current]
        labels = self.labels
        for i in range(len(labels) - 1, -1, -1):
            if labels[i] == var:
                return self.rows[self.start + i]
        return None

    def rows_of(self, var: str | None) -> list[dict]:
        start, rows = self.start, self.rows
        if var is None:
            chosen = rows[start:start + len(self.labels)]
        else:
            chosen = [rows[start + i] for i, label in enumerate(self.labels) if label == var]
        if self.current is not None and (var is None or var == self.var):
            chosen.append(rows[self.current])
        return chosen


def get_path(row: dict | None, path: tuple[str, ...]):
    value = row
    for name in path:
        if not isinstance(value, dict):
            return None
        value = value.get(name)
    return value


Evaluator = Callable[[Frame], Any]


def _compare(op: Callable) -> Callable:
    def compare(a, b):
        if a is None or b is None:
            return None
        try:
            return op(a, b)
        except TypeError:
            if isinstance(a, str) or isinstance(b, str):  # '5' = 5: compare as text, as loosely typed JSON asks
                return op(str(a), str(b))
            return None
    return compare


def _arith(op: Callable) -> Callable:
    def arith(a, b):
        if a is None or b is None:
            return None
        try:
            return op(a, b)
        except (TypeError, ZeroDivisionError, ValueError):
            return None
    return arith


BINARY = {
    "=": _compare(operator.eq), "<>": _compare(operator.ne), "<": _compare(operator.lt),
    "<=": _compare(operator.le), ">": _compare(operator.gt), ">=": _compare(operator.ge),
    "+": _arith(operator.add), "-": _arith(operator.sub), "*": _arith(operator.mul),
    "/": _arith(operator.truediv), "%": _arith(operator.mod),
    "||": lambda a, b: None if a is None or b is None else f"{a}{b}",
}


def _like(pattern: str) -> re.Pattern:
    parts = []
    for ch in pattern:
        parts.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
    return re.compile("".join(parts), re.DOTALL)


def _aggregate(function: str, values: list, distinct: bool):
    if function == "COUNT":
        present = [v for v in values if v is not None]
        if distinct:
            return len({_hashable(v) for v in present})
        return len(present)
    if function == "FIRST":
        return values[0] if values else None
    if function == "LAST":
        return values[-1] if values else None
    numbers = [v for v in values if v is not None]
    if distinct:
        numbers = list(dict.fromkeys(_hashable(v) for v in numbers))
    if not numbers:
        return None
    try:
        if function == "SUM":
            return sum(numbers)
        if function == "AVG":
            return sum(numbers) / len(numbers)
        return (min if function == "MIN" else max)(numbers)
    except TypeError:
        return None


def _hashable(value):
    if isinstance(value, (dict, list)):
        return repr(value)
    return value


class _NotOneRow(Exception):
    """The expression looks at more than the current row (another variable's row, PREV, an aggregate)."""


@dataclass(frozen=True)
class _OneRow:
    var: str | None  # the variable whose DEFINE this is: its fields are the current row's
    tables: dict


def compile_row_expression(node, var: str | None = None, tables: dict | None = None) -> Callable[[dict], Any] | None:
    """A closure ``row -> value`` for an expression that looks at the current row alone (a WHERE; a DEFINE of
    ``var`` that names no other variable, no PREV, no aggregate), evaluated without a :class:`Frame`; None for
    any other expression."""
    try:
        return compile_expression(node, _OneRow(var, tables or {}))
    except _NotOneRow:
        return None


def compile_expression(node, one_row: _OneRow | None = None) -> Evaluator:
    """A closure ``frame -> value`` for ``node`` (``row -> value`` with ``one_row``: see
    :func:`compile_row_expression`). Only fields, PREV, aggregates and LOOKUP look at what they are given;
    every other node passes it on to its children."""
    if isinstance(node, Literal):
        value = node.value
        return lambda f: value
    if one_row is not None and isinstance(node, Field):
        if node.var is not None and node.var != one_row.var:
            raise _NotOneRow
        path = node.path
        if len(path) == 1:
            name = path[0]
            return lambda row: row.get(name)
        return lambda row: get_path(row, path)
    if one_row is not None and isinstance(node, (Prev, Aggregate)):
        raise _NotOneRow
    if isinstance(node, Field):
        path, var = node.path, node.var
        if var is None:
            if len(path) == 1:
                name = path[0]

                def current_field(f: Frame):
                    row = f.row()
                    return row.get(name) if row is not None else None
                return current_field
            return lambda f: get_path(f.row(), path)
        if len(path) == 1:
            name = path[0]

            def var_field(f: Frame):
                row = f.last_of(var)
                return row.get(name) if type(row) is dict else get_path(row, path)
            return var_field
        return lambda f: get_path(f.last_of(var), path)
    if isinstance(node, Prev):
        path, var, steps = node.field.path, node.field.var, node.steps

        def prev(f: Frame):
            if var is None:
                index = f.current if f.current is not None else f.start + len(f.labels) - 1
            else:
                row = f.last_of(var)
                if row is None:
                    return None
                index = _index_of(f, var)
            index -= steps
            return get_path(f.rows[index], path) if 0 <= index else None
        return prev
    if isinstance(node, Aggregate):
        function, var, distinct = node.function, node.var, node.distinct
        if node.field is None:  # COUNT(*), COUNT(A.*): the labels say it
            if var is None:
                return lambda f: len(f.labels) + (f.current is not None)
            return lambda f: f.labels.count(var) + (f.current is not None and f.var == var)
        path = node.field.path
        if len(path) == 1 and function == "COUNT" and distinct:
            name = path[0]

            def count_distinct(f):
                memo, current = f.memo, f.current
                if var is None and memo is not None and current is not None and current == f.start + len(f.labels):
                    # the rows from the start row to the current one: the set of the attempt's previous test,
                    # one row shorter, is extended by the current row (S*? T: linear in the rows, not quadratic)
                    kept = memo.get(count_distinct)
                    if kept is not None and kept[0] == current:
                        values = kept[1]
                        values.add(f.rows[current].get(name))
                    else:
                        values = {row.get(name) for row in f.rows_of(None)}
                    memo[count_distinct] = (current + 1, values)
                    return len(values) - (None in values)
                values = {row.get(name) for row in f.rows_of(var)}  # rows are events: JSON objects
                values.discard(None)
                return len(values)

            def count_distinct_any(f):
                try:
                    return count_distinct(f)
                except TypeError:  # a list or object among the values
                    return _aggregate(function, [get_path(r, path) for r in f.rows_of(var)], distinct)
            return count_distinct_any
        if function == "FIRST":  # the first of the rows' values: read from that row alone
            return lambda f: get_path(_first_of(f, var), path)
        if function == "LAST":
            return lambda f: get_path(f.row() if var is None else f.last_of(var), path)
        return lambda f: _aggregate(function, [get_path(r, path) for r in f.rows_of(var)], distinct)
    if isinstance(node, Unary):
        operand = compile_expression(node.operand, one_row)
        if node.op == "NOT":
            def negate(f):
                v = operand(f)
                return None if v is None else not v
            return negate
        return lambda f: _arith(operator.sub)(0, operand(f))
    if isinstance(node, Binary):
        left, right = compile_expression(node.left, one_row), compile_expression(node.right, one_row)
        if node.op == "AND":
            def conj(f):
                a = left(f)
                if a is False:
                    return False
                b = right(f)
                if b is False:
                    return False
                return None if a is None or b is None else bool(a) and bool(b)
            return conj
        if node.op == "OR":
            def disj(f):
                a = left(f)
                if a is True or (a is not None and a):
                    return True
                b = right(f)
                if b is not None and b:
                    return True
                return None if a is None or b is None else False
            return disj
        op = BINARY[node.op]
        if node.op in COMPARISONS and isinstance(node.right, Literal) and node.right.value is not None:
            return _compare_to_literal(node, left, one_row)
        return lambda f: op(left(f), right(f))
    if isinstance(node, InList):
        operand = compile_expression(node.operand, one_row)
        negated = node.negated
        if all(isinstance(i, Literal) for i in node.items):
            options = {_hashable(i.value) for i in node.items}

            def in_literals(f):
                v = operand(f)
                if v is None:
                    return None
                return (_hashable(v) in options) != negated
            return in_literals
        items = [compile_expression(i, one_row) for i in node.items]

        def in_list(f):
            v = operand(f)
            if v is None:
                return None
            return any(v == item(f) for item in items) != negated
        return in_list
    if isinstance(node, IsNull):
        operand, negated = compile_expression(node.operand, one_row), node.negated
        return lambda f: (operand(f) is None) != negated
    if isinstance(node, Like):
        operand, negated, pattern = compile_expression(node.operand, one_row), node.negated, _like(node.pattern)

        def like(f):
            v = operand(f)
            return None if v is None else (pattern.fullmatch(str(v)) is not None) != negated
        return like
    if isinstance(node, Case):
        whens = [(compile_expression(c, one_row), compile_expression(r, one_row)) for c, r in node.whens]
        otherwise = compile_expression(node.otherwise, one_row)

        def case(f):
            for condition, result in whens:
                v = condition(f)
                if v is not None and v:
                    return result(f)
            return otherwise(f)
        return case
    if isinstance(node, Call):
        args = [compile_expression(a, one_row) for a in node.args]
        fn = node.function
        if fn == "LOOKUP":
            table_name = node.args[0].path[0]
            key = args[1]

            fixed = one_row.tables.get(table_name, {}) if one_row is not None else None

            def lookup(f):
                k = key(f)
                table = fixed if fixed is not None else f.tables.get(table_name, {})
                return table.get(k if not isinstance(k, float) or not k.is_integer() else int(k))
            return lookup
        if fn == "COALESCE":
            def coalesce(f):
                for a in args:
                    v = a(f)
                    if v is not None:
                        return v
                return None
            return coalesce
        one = args[0]
        simple = {"LOWER": lambda v: str(v).lower(), "UPPER": lambda v: str(v).upper(),
                  "LENGTH": lambda v: len(str(v)), "ABS": lambda v: abs(v) if isinstance(v, (int, float)) else None}[fn]
        return lambda f: (None if (v := one(f)) is None else simple(v))
    raise TypeError(f"not an expression node: {node!r}")


COMPARISONS = {"=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
               ">=": operator.ge}


def _compare_to_literal(node: Binary, left: Evaluator, one_row: _OneRow | None) -> Evaluator:
    """``x op literal``, the usual condition, in one closure: what ``BINARY[op]`` does, without its calls;
    ``field = literal`` on the current row alone (``one_row``) with the field read inline too."""
    value, raw, loose = node.right.value, COMPARISONS[node.op], BINARY[node.op]
    field = node.left if one_row is not None and isinstance(node.left, Field) and len(node.left.path) == 1 else None
    if field is not None and node.op == "=":  # == never raises: no text fallback needed
        name = field.path[0]
        return lambda row: None if (a := row.get(name)) is None else a == value

    def compare(f):
        a = left(f)
        if a is None:
            return None
        try:
            return raw(a, value)
        except TypeError:
            return loose(a, value)
    return compare


def _first_of(f: Frame, var: str | None):
    """The first of ``f.rows_of(var)``, without the list; None if there is none."""
    labels = f.labels
    if var is None:
        index = f.start if labels else f.current
    elif var in labels:
        index = f.start + labels.index(var)
    else:
        index = f.current if var == f.var else None
    return None if index is None else f.rows[index]


def _index_of(f: Frame, var: str) -> int:
    if f.current is not None and var == f.var:
        return f.current
    for i in range(len(f.labels) - 1, -1, -1):
        if f.labels[i] == var:
            return f.start + i
    return -1


def holds(value) -> bool:
    """A condition holds only when it is TRUE (NULL, unknown, does not)."""
    return value is not None and value is not False and bool(value)
