"""JSON paths evaluated for the search without jsonpath-ng's per-record walk (issue 49).

``compile_path`` turns a parsed jsonpath-ng expression into a function of (value, document root) that returns what
jsonpath-ng's ``find`` returns (the values, in the same order), for the nodes whose semantics are jsonpath-ng's
own and plain: ``$``, ``@``, fields (one, several, ``*``), wildcards, indexes, slices, recursive descent (``..``,
pre-order as jsonpath-ng walks it) and filters whose conditions are tests, comparisons with a literal or with
another path, regular expressions (``=~``, ``re.search``), negations (``!``), ``&&`` and ``||``; comparisons are
jsonpath-ng's own (RFC 9535: a string never equals a number, booleans and null only equal themselves, only two
numbers or two strings are ordered; a missing member equals nothing, so only ``!=`` holds for it). Anything else
(``len``, sorting, arithmetic, ``parent``, unions, an id field) compiles to None and is left to jsonpath-ng.

``NumberNeed`` is a scan that avoids parsing a value at all: a path compared with a number (``$.amount >= 100``,
``$.items[?(@.qty > 5)]``) finds something only where the value holds the member as JSON writes it followed by a
number that satisfies the comparison (``"qty": 7``): without a backslash in the value (an escape could spell the
name otherwise) ``"name"`` followed by ``:`` is always a member name, never a string's text. The scan finds those
spots with one regular expression over a batch's buffer; only the values holding one are parsed.
"""

from __future__ import annotations

import json
import re

ORDERED = ("<", "<=", ">", ">=")


class BadPattern(ValueError):
    """A ``=~`` whose right side is no regular expression (the message says why)."""


class Unsupported(Exception):
    """A node the direct evaluation leaves to jsonpath-ng."""


def compile_path(expression):
    """``f(value, root) -> list`` of what ``expression.find(value)`` finds (its values), or None when a node of
    it is left to jsonpath-ng."""
    import jsonpath_ng.jsonpath as jp

    if jp.auto_id_field is not None:
        return None
    try:
        return _compile(expression)
    except Unsupported:
        return None


def _compile(node):
    from jsonpath_ng.ext.filter import Filter
    from jsonpath_ng.jsonpath import Child, Descendants, Fields, Index, Root, Slice, This, Wildcard

    kind = type(node)
    if kind is Root:
        return lambda value, root: [root]
    if kind is This:
        return lambda value, root: [value]
    if kind is Child:
        steps = []
        while type(node) is Child:  # a chain a.b.c: one loop over its steps
            steps.append(node.right)
            node = node.left
        steps.append(node)
        compiled = [_compile(s) for s in reversed(steps)]
        first, rest = compiled[0], compiled[1:]

        def chain(value, root):
            found = first(value, root)
            for step in rest:
                if not found:
                    return found
                found = [y for x in found for y in step(x, root)]
            return found
        return chain
    if kind is Fields:
        if getattr(node, "_deprecated_wildcard_use", False):
            return _children
        names = node.fields
        if len(names) == 1:
            name = names[0]

            def field(value, root):
                if value.__class__ is dict and name in value:
                    return [value[name]]
                return []
            return field
        return lambda value, root: [value[n] for n in names if n in value] if value.__class__ is dict else []
    if kind is Wildcard:
        return _children
    if kind is Index:
        indices = node.indices
        return lambda value, root: [value[i] for i in indices if -len(value) <= i < len(value)] \
            if value.__class__ is list else []
    if kind is Slice:
        if getattr(node, "_deprecated_wildcard_use", False):
            return lambda value, root: list(value.values()) if value.__class__ is dict else \
                (list(value) if value.__class__ is list else [])
        if node.step == 0:
            return lambda value, root: []
        cut = slice(node.start, node.end, node.step)
        return lambda value, root: value[cut] if value.__class__ is list else []
    if kind is Descendants:
        return _descendants(_compile(node.left), _compile(node.right))
    if kind is Filter:
        conditions = [_condition(e) for e in node.expressions]
        if len(conditions) == 1:
            only = conditions[0]

            def filter_one(value, root):
                if value.__class__ is dict:
                    value = value.values()
                elif value.__class__ is not list:
                    return []
                return [c for c in value if only(c, root)]
            return filter_one

        def filter_all(value, root):
            if value.__class__ is dict:
                value = value.values()
            elif value.__class__ is not list:
                return []
            return [c for c in value if all(condition(c, root) for condition in conditions)]
        return filter_all
    raise Unsupported(kind.__name__)


def _children(value, root) -> list:
    if value.__class__ is list:
        return list(value)
    if value.__class__ is dict:
        return list(value.values())
    return []


def _descendants(left, right):
    """``left..right``: right applied to every node under each of left's, pre-order (a node, then its children
    in order), as jsonpath-ng walks it."""
    def find(value, root):
        out = []
        for start in left(value, root):
            stack = [start]
            while stack:
                node = stack.pop()
                out += right(node, root)
                if node.__class__ is list:
                    stack += reversed(node)
                elif node.__class__ is dict:
                    stack += reversed(node.values())
        return out
    return find


def _condition(node):
    """``f(candidate, root) -> bool``: whether a filter's expression holds for a candidate."""
    from jsonpath_ng.ext.filter import EQUALITY_ONLY_OPERATOR_MAP as EQUALITY
    from jsonpath_ng.ext.filter import And, Expression, Or
    from jsonpath_ng.ext.filter import _compare as compare
    from jsonpath_ng.jsonpath import JSONPath

    kind = type(node)
    if kind is And:
        parts = [_condition(o) for o in node.operands]
        return lambda value, root: all(p(value, root) for p in parts)
    if kind is Or:
        parts = [_condition(o) for o in node.operands]
        return lambda value, root: any(p(value, root) for p in parts)
    if kind is not Expression:
        raise Unsupported(kind.__name__)
    target, op, literal = _compile(node.target), node.op, node.value
    if op == "!":
        return lambda value, root: not target(value, root)
    if op is None:
        return lambda value, root: bool(target(value, root))
    if op not in EQUALITY and op != "=~":
        raise Unsupported(op)
    if isinstance(literal, JSONPath):  # a path on the right: every pair compared (two empty sides are equal)
        if op == "=~":
            raise Unsupported(op)
        other = _compile(literal)
        equal_if_empty = EQUALITY[op]

        def against_path(value, root):
            found, values = target(value, root), other(value, root)
            if not found or not values:
                return equal_if_empty(not found and not values)
            return any(compare(op, f, v) for f in found for v in values)
        return against_path
    if op == "=~":
        if not isinstance(literal, str):
            raise Unsupported(op)
        try:
            search = re.compile(literal).search
        except re.error as exc:
            raise BadPattern(f"{literal!r} is not a regular expression: {exc}") from None
        return lambda value, root: any(isinstance(x, str) and search(x) for x in target(value, root))
    missing = op == "!="  # a missing member equals nothing: only != holds
    holds_if_equal = EQUALITY[op]
    if literal is None:
        def test(x):
            return holds_if_equal(x is None)
    elif isinstance(literal, bool):
        def test(x):
            return holds_if_equal(x is literal)
    else:
        def test(x):
            if x.__class__ is bool:
                return holds_if_equal(False)
            return compare(op, x, literal)

    def expression(value, root):
        found = target(value, root)
        if not found:
            return missing
        return any(test(x) for x in found)
    return expression


NUMBER = rb"(-?[0-9][0-9.eE+-]*)"
SPACE = rb"[ \t\r\n]*"


class NumberNeed:
    """A member named ``name`` whose value is a number ``op literal`` (see the module's docstring)."""

    def __init__(self, name: str, op: str, literal) -> None:
        self.name, self.op, self.literal = name, op, literal
        written = json.dumps(name, ensure_ascii=False).encode()
        self.pattern = re.compile(re.escape(written) + SPACE + b":" + SPACE + NUMBER)
        self.candidates = candidate_pattern(written, op, literal)

    def satisfied_by(self, text: bytes) -> bool:
        try:
            x = int(text) if text.lstrip(b"-").isdigit() else float(text)  # as json.loads reads it
        except ValueError:
            return True  # not a number as Python reads it: let the parse decide
        literal, op = self.literal, self.op
        if op == "==":
            return x == literal
        return {"<": x < literal, "<=": x <= literal, ">": x > literal, ">=": x >= literal}[op]

    def found_in(self, raw) -> bool:
        """Whether ``raw`` (a value without a backslash) may match: it holds the member with such a number."""
        return any(self.satisfied_by(m.group(1)) for m in self.pattern.finditer(raw))

    def spots(self, data) -> list[int]:
        """Where in ``data`` (a buffer of many values) the member is written with a number that satisfies it. The
        numbers are read first all at once (numpy, as floats, as json.loads reads all but integers) and judged
        exactly (integers beyond 2**53 with a margin wider than their rounding), so a batch with none satisfying
        the comparison costs one pass; only a batch with some is searched
        again for where they are, each judged exactly."""
        import numpy as np

        texts = self.pattern.findall(data)
        if not texts:
            return []
        try:
            x = np.array(texts, dtype="S").astype(np.float64)
            literal = float(self.literal)
        except (ValueError, OverflowError):
            pass
        else:
            # below 2**53 a float holds an integer exactly and json.loads reads any other number as a float: no
            # margin; beyond, integers round, so a margin far wider than the rounding
            largest = np.maximum(np.abs(x), abs(literal))
            margin = np.where(largest >= 2.0 ** 53, largest * 1e-12, 0.0)
            maybe = {">": lambda: x > literal - margin, ">=": lambda: x >= literal - margin,
                     "<": lambda: x < literal + margin, "<=": lambda: x <= literal + margin,
                     "==": lambda: np.abs(x - literal) <= margin}[self.op]()
            if not maybe.any():
                return []
        return [m.start() for m in self.pattern.finditer(data) if self.satisfied_by(m.group(1))]


DIGITS_EXACT = 15  # a number's text with at most 15 significant digits reads as a float on the right side of any
# integer below 10**15 it differs from: the digits decide; with more, rounding may carry it across one


def candidate_pattern(written: bytes, op: str, literal) -> str | None:
    """A regular expression (RE2's, for Arrow's ``match_substring_regex`` over a whole batch in C++) that every value
    holding ``written`` (a member name as JSON writes it) followed by a number satisfying ``op literal`` matches,
    judged by the number's digits alone: for ``$.amount > 999999``, seven digits or more, or six that are 999999
    followed by a fraction or an exponent, or an exponent anywhere, or a fraction long enough for a float to round
    (16 significant digits). A necessary condition, never sufficient: a value it matches is judged exactly after.
    None when the digits cannot narrow it down: a bound below 1 (``> 0`` holds for most numbers), from 10**15 on
    (integers read as floats round), ``<`` and ``<=`` of a positive number, ``>`` and ``>=`` of a negative one."""
    if op in (">", ">="):
        sign, bound, strict = "", literal, op == ">"
    elif op in ("<", "<="):
        sign, bound, strict = "-", -literal, op == "<"
    else:  # ==
        sign, bound, strict = ("-" if literal < 0 else ""), abs(literal), None
    if not 1 <= bound < 10 ** DIGITS_EXACT:
        return None
    digits = str(int(bound))
    k = len(digits)
    # the bound's own integer digits (followed by a fraction or exponent only, where equal does not do)
    alternatives = [digits + ("[.eE]" if strict and bound == int(bound) else "")]
    if strict is not None:  # an ordering: more digits, or as many and larger
        alternatives.append(f"[1-9][0-9]{{{k}}}")
        for i, d in enumerate(digits):
            if d != "9":
                alternatives.append(digits[:i] + f"[{int(d) + 1}-9]" + (f"[0-9]{{{k - 1 - i}}}" if i < k - 1 else ""))
    alternatives.append("[0-9][0-9.]*[eE]")  # an exponent: judged exactly
    alternatives.append(f"[0-9]+\\.[0-9]{{{max(1, DIGITS_EXACT + 1 - k)},}}")  # enough digits for a float to round
    # the name without its opening quote (a superset: any name ending so), as RE2 skips ahead to its first byte, and a
    # quote is the commonest byte of JSON: twice as fast
    name = "".join(chr(b) if chr(b).isalnum() and b < 128 else f"\\x{b:02x}" for b in written[1:])
    space = r"[ \t\r\n]*"
    return f"{name}{space}:{space}{sign}(?:{'|'.join(alternatives)})"


def number_need(expression, compare) -> NumberNeed | None:
    """The member and number comparison every match needs: the path's own comparison (``PATH OP number``, the
    path ending in one named member), or, without one, a filter's ``@...name OP number`` on a path that must match
    in every part for it to find anything (no union, or, negation). Only ``==`` and the ordering operators (``!=``
    holds where the member is missing); None when there is no such need."""
    from jsonpath_ng.jsonpath import Child, Descendants, Fields

    def number(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    def named(path) -> str | None:
        last = path.right if type(path) in (Child, Descendants) else path
        if type(last) is Fields and len(last.fields) == 1 and not getattr(last, "_deprecated_wildcard_use", False):
            return last.fields[0]
        return None

    if compare is not None:
        op, literal = compare
        name = named(expression)
        ok = name is not None and number(literal) and (op == "==" or op in ORDERED)
        return NumberNeed(name, op, literal) if ok else None
    found = [need_of(e) for e in necessary_conditions(expression) or ()]
    found = [n for n in found if isinstance(n, NumberNeed)]
    return found[0] if found else None


def need_of(condition):
    """What a value must hold for a filter's ``condition`` to hold in it: bytes (``@.f == 's'``: the string as
    JSON writes it), a NumberNeed (``@.f OP number``), or None."""
    from jsonpath_ng.ext.filter import Expression
    from jsonpath_ng.jsonpath import Child, Descendants, Fields

    if type(condition) is not Expression:
        return None
    if condition.op == "==" and isinstance(condition.value, str):
        return json.dumps(condition.value, ensure_ascii=False).encode()
    if condition.op == "=~" and isinstance(condition.value, str):
        text = regex_literal(condition.value)
        return json.dumps(text, ensure_ascii=False)[1:-1].encode() if text else None
    last = condition.target.right if type(condition.target) in (Child, Descendants) else condition.target
    number = isinstance(condition.value, (int, float)) and not isinstance(condition.value, bool)
    if type(last) is Fields and len(last.fields) == 1 and not getattr(last, "_deprecated_wildcard_use", False) \
            and number and (condition.op == "==" or condition.op in ORDERED):
        return NumberNeed(last.fields[0], condition.op, condition.value)
    return None


def regex_literal(pattern: str) -> str | None:
    """The longest run of characters every match of ``pattern`` (Python's ``re.search``, as ``=~`` runs it) holds
    in that order: consecutive literals at the pattern's top level (``^plan`` -> ``plan``, ``a.*order-7$`` ->
    ``order-7``); None when there is none (an alternation at the top, only classes and repeats), or when the
    pattern ignores case."""
    import re._parser as parser  # the parser of Python's own re: what a literal is here is what re.search matches

    try:
        parsed = parser.parse(pattern)
    except re.error:
        return None
    if parsed.state.flags & re.IGNORECASE:
        return None
    best, run = "", []
    for op, arg in (*parsed, (None, None)):
        if op is parser.LITERAL:
            run.append(chr(arg))
            continue
        if len(run) > len(best):
            best = "".join(run)
        run = []
    return best or None


def either_need(expression) -> list | None:
    """For a path whose filter holds an ``||`` (on a path that must match in every part): what each of its
    operands needs (``need_of``; an ``&&`` operand: the first of its parts that needs something), one of which
    a matching value holds; None when an operand needs nothing a scan can find."""
    from jsonpath_ng.ext.filter import And, Or

    for condition in necessary_conditions(expression) or ():
        if type(condition) is not Or:
            continue
        needs = []
        for operand in condition.operands:
            parts = operand.operands if type(operand) is And else [operand]
            need = next((n for n in map(need_of, parts) if n is not None), None)
            if need is None:
                break
            needs.append(need)
        else:
            return needs
    return None


def necessary_conditions(expression) -> list | None:
    """The filter expressions (and ``||``s of a filter) of a path that must each hold somewhere for the path to
    find anything (every part of it must match: no union, negation); None when the path is not made so."""
    from jsonpath_ng.ext.filter import Expression, Filter, Or
    from jsonpath_ng.jsonpath import Child, Descendants, Fields, Index, Root, Slice, This, Wildcard

    safe = (Child, Descendants, Fields, Index, Root, Slice, This, Wildcard, Filter, Expression, Or)
    found: list = []

    def walk(node) -> bool:
        if type(node) not in safe:
            return False
        if isinstance(node, Filter):
            return all(walk(e) for e in node.expressions)
        if isinstance(node, Or):  # one of its operands must hold: necessary as a whole (either_need)
            found.append(node)
            return True
        if isinstance(node, Expression):
            found.append(node)
            return node.op != "!" and walk(node.target)
        return all(walk(child) for child in (getattr(node, "left", None), getattr(node, "right", None))
                   if child is not None)

    return found if walk(expression) else None
