"""Search on streams: stored queries matched against every new event, as a percolator does.

A query mixes full text and field filters::

    garden "close to the station" AND NOT leasehold
    city = Delft AND price < 400000 AND (bedrooms >= 3 OR garden)
    title:"canal view" OR city IN (Amsterdam, Utrecht)

Bare words and "phrases" search every text field (a phrase: its words in a row); ``field:word`` one
field; ``field = v``, ``<>``, ``<``, ``<=``, ``>``, ``>=``, ``IN (...)`` compare a field (text case
blind); AND, OR, NOT, parentheses; adjacent terms are ANDed.

The queries are indexed, not the events (Lucene's monitor, Elasticsearch's percolator): each query
gets the terms one of which any event it matches must contain (the rarest side of an AND, every side
of an OR, a phrase's longest word, ``field:value`` for equality). An event's terms pick the candidate
queries from that index; queries that bound a number (``price <= 400000``) are kept by that band too,
so the event's number picks those whose band holds it, among the queries with no terms as well (a lone
range filter, a NOT). Only what the terms and the band do not prove is verified.
"""

from __future__ import annotations

import bisect
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .expressions import RuleSyntaxError

WORD = re.compile(r"\w+", re.UNICODE)
QUERY_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<phrase>"[^"]*")
  | (?P<string>'(?:[^']|'')*')
  | (?P<op><=|>=|<>|!=|[=<>():,])
  | (?P<word>[^\s"'=<>():,!]+)
""", re.VERBOSE)


def words(text: str) -> list[str]:
    return [w.lower() for w in WORD.findall(text)]


# ---- the query tree ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Term:
    word: str
    field: str | None = None


@dataclass(frozen=True)
class Phrase:
    words: tuple[str, ...]
    field: str | None = None


@dataclass(frozen=True)
class Compare:
    field: str
    op: str
    value: Any


@dataclass(frozen=True)
class OneOf:
    field: str
    values: tuple


@dataclass(frozen=True)
class And:
    parts: tuple


@dataclass(frozen=True)
class Or:
    parts: tuple


@dataclass(frozen=True)
class Not:
    part: Any


def parse_query(text: str):
    """Parse a stored query; RuleSyntaxError says what is wrong and where."""
    tokens = []
    pos = 0
    while pos < len(text):
        m = QUERY_TOKEN.match(text, pos)
        if m is None:
            raise RuleSyntaxError(f"unexpected {text[pos]!r} at position {pos}")
        if m.lastgroup != "ws":
            tokens.append((m.lastgroup, m.group(), pos))
        pos = m.end()
    if not tokens:
        raise RuleSyntaxError("the query is empty")
    parser = _QueryParser(tokens)
    node = parser.disjunction()
    if parser.i < len(tokens):
        kind, value, at = tokens[parser.i]
        raise RuleSyntaxError(f"unexpected {value!r} at position {at}")
    return node


def _value(kind: str, text: str):
    if kind == "string":
        return text[1:-1].replace("''", "'")
    if kind == "phrase":
        return text[1:-1]
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


class _QueryParser:
    def __init__(self, tokens) -> None:
        self.tokens, self.i = tokens, 0

    def peek(self, ahead: int = 0):
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else ("end", "", -1)

    def is_word(self, value: str, ahead: int = 0) -> bool:
        kind, text, _ = self.peek(ahead)
        return kind == "word" and text.upper() == value

    def fail(self, message: str):
        kind, text, at = self.peek()
        found = "the end" if kind == "end" else repr(text)
        raise RuleSyntaxError(f"{message}, found {found}" + (f" at position {at}" if at >= 0 else ""))

    def disjunction(self):
        parts = [self.conjunction()]
        while self.is_word("OR"):
            self.i += 1
            parts.append(self.conjunction())
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def conjunction(self):
        parts = [self.negation()]
        while True:
            if self.is_word("AND"):
                self.i += 1
                parts.append(self.negation())
            elif self.peek()[0] in ("word", "phrase", "string") and not self.is_word("OR") or self.peek()[1] == "(":
                parts.append(self.negation())  # adjacent terms: AND
            else:
                break
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def negation(self):
        if self.is_word("NOT"):
            self.i += 1
            return Not(self.negation())
        return self.primary()

    def primary(self):
        kind, text, _ = self.peek()
        if text == "(" and kind == "op":
            self.i += 1
            node = self.disjunction()
            if self.peek()[1] != ")":
                self.fail("expected )")
            self.i += 1
            return node
        if kind == "phrase":
            self.i += 1
            found = tuple(words(text[1:-1]))
            if not found:
                raise RuleSyntaxError(f"the phrase {text} has no words")
            return Phrase(found) if len(found) > 1 else Term(found[0])
        if kind in ("word", "string"):
            if self.is_word("AND") or self.is_word("OR"):
                self.fail("expected a term")
            following = self.peek(1)
            if kind == "word" and following[0] == "op" and following[1] in ("=", "<>", "!=", "<", "<=", ">", ">="):
                self.i += 2
                op = "<>" if following[1] == "!=" else following[1]
                return Compare(text, op, self.value())
            if kind == "word" and following[0] == "word" and following[1].upper() == "IN":
                self.i += 2
                return OneOf(text, self.value_list())
            if kind == "word" and following[1] == ":" and following[0] == "op":
                self.i += 2
                target = self.peek()
                if target[0] not in ("word", "phrase", "string"):
                    self.fail(f"expected a word or phrase after {text}:")
                self.i += 1
                found = tuple(words(str(_value(target[0], target[1]))))
                if not found:
                    raise RuleSyntaxError(f"{text}: has no words to look for")
                return Phrase(found, text) if len(found) > 1 else Term(found[0], text)
            self.i += 1
            found = words(str(_value(kind, text)))
            if not found:
                raise RuleSyntaxError(f"{text!r} has no words to look for")
            return Phrase(tuple(found)) if len(found) > 1 else Term(found[0])
        self.fail("expected a term")

    def value(self):
        kind, text, _ = self.peek()
        if kind not in ("word", "string", "phrase"):
            self.fail("expected a value")
        self.i += 1
        return _value(kind, text)

    def value_list(self) -> tuple:
        if self.peek()[1] != "(":
            self.fail("expected ( after IN")
        self.i += 1
        values = [self.value()]
        while self.peek()[1] == ",":
            self.i += 1
            values.append(self.value())
        if self.peek()[1] != ")":
            self.fail("expected )")
        self.i += 1
        return tuple(values)


# ---- documents -----------------------------------------------------------------------------------

class Document:
    """An event as the queries see it: flattened fields (``a.b`` for nested objects), each text field's
    words, and the set of terms for the presearch (every word, ``field:word`` and ``field=value``)."""

    __slots__ = ("fields", "field_words", "terms", "all_words", "_bigrams")

    def __init__(self, event: dict) -> None:
        fields: dict[str, Any] = {}
        for key, value in event.items():  # the top level inline: most events are flat
            kind = type(value)
            if (kind is str or kind is int or kind is float or kind is bool or value is None) \
                    and key and key[-1] != ".":
                fields[key] = value
            else:
                _flatten(value, f"{key}." if isinstance(value, dict) else key, fields)
        self.fields = fields
        field_words: dict[str, list[str]] = {}
        self.field_words = field_words
        terms: set[str] = set()
        all_words: list[list[str]] = []
        findall = WORD.findall
        for name, value in fields.items():
            if isinstance(value, str):
                lowered = value.lower()
                # words(value); an ASCII text's words lowered are the lowered text's words
                found = findall(lowered) if value.isascii() else [w.lower() for w in findall(value)]
                field_words[name] = found
                all_words.append(found)
                terms.update(found)
                lname = name.lower()
                prefix = lname + ":"
                terms.update([prefix + w for w in found])
                terms.add(lname + "=" + lowered)
            elif type(value) is int and value >= 0:  # its one word is its digits
                terms.add(name.lower() + ":" + str(value))
            elif isinstance(value, (int, float)):  # bool too: field:true
                terms.update(f"{name.lower()}:{w}" for w in words(str(value)))
                if isinstance(value, bool):  # flag = true compares the text 'true'
                    terms.add(f"{name.lower()}={str(value).lower()}")
        self.terms = terms
        self.all_words = all_words
        self._bigrams = None

    @property
    def bigrams(self) -> set[str]:
        """Every two words in a row in a text field (made on first use)."""
        if self._bigrams is None:
            self._bigrams = {f"{a} {b}" for seq in self.all_words for a, b in zip(seq, seq[1:])}
        return self._bigrams


def _textual(value) -> bool:
    """A query value that only a text field's equal value matches (not a number in disguise)."""
    if not isinstance(value, str):
        return False
    try:
        float(value)
    except ValueError:
        return True
    return False


def _flatten(value, prefix: str, out: dict) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(v, f"{prefix}{k}." if isinstance(v, dict) else f"{prefix}{k}", out)
    elif isinstance(value, list):
        texts = [v for v in value if isinstance(v, (str, int, float))]
        if texts and prefix:
            out[prefix] = " ".join(str(t) for t in texts)
    elif prefix:
        out[prefix.rstrip(".")] = value


def _field(doc: Document, name: str):
    if name in doc.fields:
        return doc.fields[name]
    lname = name.lower()
    for key, value in doc.fields.items():
        if key.lower() == lname:
            return value
    return None


def _contains_phrase(sequence: list[str], phrase: tuple[str, ...]) -> bool:
    n = len(phrase)
    first = phrase[0]
    for i, w in enumerate(sequence):
        if w == first and tuple(sequence[i:i + n]) == phrase:
            return True
    return False


def _field_words(doc: Document, name: str) -> list[str]:
    if name in doc.field_words:
        return doc.field_words[name]
    lname = name.lower()
    for key, found in doc.field_words.items():
        if key.lower() == lname:
            return found
    value = _field(doc, name)
    return words(str(value)) if value is not None else []


def _compare(left, op: str, right) -> bool:
    if left is None:
        return False
    if isinstance(left, str) or isinstance(right, str):
        if isinstance(left, (int, float)) and not isinstance(left, bool) and isinstance(right, str):
            try:
                right = float(right)
            except ValueError:
                left = str(left)
        elif isinstance(left, str) and isinstance(right, (int, float)):
            try:
                left = float(left)
            except ValueError:
                right = str(right)
        if isinstance(left, str) and isinstance(right, str):
            left, right = left.lower(), right.lower()
    try:
        return {"=": left == right, "<>": left != right}[op] if op in ("=", "<>") else {
            "<": lambda: left < right, "<=": lambda: left <= right, ">": lambda: left > right,
            ">=": lambda: left >= right}[op]()
    except TypeError:
        return False


def matches(node, doc: Document) -> bool:
    """Does the query match the document? (The verification step, and the brute-force reference.)"""
    if isinstance(node, Term):
        if node.field is None:
            return node.word in doc.terms
        return node.word in _field_words(doc, node.field)
    if isinstance(node, Phrase):
        if node.field is None:
            return any(_contains_phrase(seq, node.words) for seq in doc.all_words)
        return _contains_phrase(_field_words(doc, node.field), node.words)
    if isinstance(node, Compare):
        return _compare(_field(doc, node.field), node.op, node.value)
    if isinstance(node, OneOf):
        value = _field(doc, node.field)
        return any(_compare(value, "=", v) for v in node.values)
    if isinstance(node, And):
        return all(matches(p, doc) for p in node.parts)
    if isinstance(node, Or):
        return any(matches(p, doc) for p in node.parts)
    if isinstance(node, Not):
        return not matches(node.part, doc)
    raise TypeError(node)


# ---- the presearch -------------------------------------------------------------------------------

def anchors(node) -> frozenset[str] | None:
    """Terms one of which every document the query matches contains; None if there is no such set."""
    if isinstance(node, Term):
        return frozenset([node.word if node.field is None else f"{node.field.lower()}:{node.word}"])
    if isinstance(node, Phrase):
        longest = max(node.words, key=len)
        return frozenset([longest if node.field is None else f"{node.field.lower()}:{longest}"])
    if isinstance(node, Compare):
        if node.op == "=" and _textual(node.value):
            return frozenset([f"{node.field.lower()}={node.value.lower()}"])
        return None  # ranges, and numbers (2611 = '02611' = 2611.0): verified, not presearched
    if isinstance(node, OneOf):
        if all(_textual(v) for v in node.values):
            return frozenset(f"{node.field.lower()}={v.lower()}" for v in node.values)
        return None
    if isinstance(node, And):
        options = [a for a in (anchors(p) for p in node.parts) if a is not None]
        if not options:
            return None
        # the smallest set of the most specific terms: field terms before words, long words before short
        return min(options, key=lambda a: (len(a), -min(len(t) + (8 if ":" in t or "=" in t else 0) for t in a)))
    if isinstance(node, Or):
        found: set[str] = set()
        for p in node.parts:
            a = anchors(p)
            if a is None:
                return None
            found |= a
        return frozenset(found)
    return None  # NOT: matches documents without the term


def _specificity(term: str) -> tuple:
    """How rare a presearch term is likely to be in events: a field's value before a field's word before
    a word anywhere; longer before shorter."""
    return ("=" in term, ":" in term, len(term))


def pair_anchor(node) -> tuple[str, str] | None:
    """Two terms every document the query matches contains both of (an AND of two single-term sides):
    the presearch then needs both in the event, not one, which cuts the candidates by the rarer one's
    frequency again."""
    if not isinstance(node, And):
        return None
    singles = sorted({next(iter(a)) for a in (anchors(p) for p in node.parts) if a is not None and len(a) == 1},
                     key=_specificity, reverse=True)
    if len(singles) < 2:
        return None
    return singles[0], singles[1]


def numeric_band(node) -> tuple[str, float, float] | None:
    """(field, low, high) when the query is an AND that bounds one field by numbers (``price >= 300000 AND
    price <= 450000``; one side may be open): an event whose field holds a number outside it cannot match."""
    if not isinstance(node, And):
        return None
    bounds: dict[str, list[float]] = {}
    for part in node.parts:
        if (isinstance(part, Compare) and part.op in ("<", "<=", ">", ">=")
                and isinstance(part.value, (int, float)) and not isinstance(part.value, bool)):
            low, high = bounds.setdefault(part.field, [float("-inf"), float("inf")])
            if part.op in (">", ">="):
                bounds[part.field][0] = max(low, part.value)
            else:
                bounds[part.field][1] = min(high, part.value)
    if not bounds:
        return None
    field, (low, high) = max(bounds.items(), key=lambda kv: (kv[1][0] > float("-inf")) + (kv[1][1] < float("inf")))
    return field, low, high


class _Bands:
    """Queries by a numeric band on one field, for finding those whose band holds a value by bisection:
    bounded bands sorted by their low end (a value v needs low in [v - widest band, v]), bands open above
    sorted by low, bands open below sorted by high."""

    __slots__ = ("bounded", "lows", "widest", "open_high", "open_high_lows", "open_low", "open_low_highs")

    def __init__(self) -> None:
        self.bounded: list[tuple[float, float, str]] = []
        self.lows: list[float] = []
        self.widest = 0.0
        self.open_high: list[tuple[float, str]] = []
        self.open_high_lows: list[float] = []
        self.open_low: list[tuple[float, str]] = []
        self.open_low_highs: list[float] = []

    def __len__(self) -> int:
        return len(self.bounded) + len(self.open_high) + len(self.open_low)

    def add(self, query_id: str, low: float, high: float) -> None:
        if low == float("-inf"):
            i = bisect.bisect_left(self.open_low_highs, high)
            self.open_low.insert(i, (high, query_id))
            self.open_low_highs.insert(i, high)
        elif high == float("inf"):
            i = bisect.bisect_left(self.open_high_lows, low)
            self.open_high.insert(i, (low, query_id))
            self.open_high_lows.insert(i, low)
        else:
            i = bisect.bisect_left(self.lows, low)
            self.bounded.insert(i, (low, high, query_id))
            self.lows.insert(i, low)
            self.widest = max(self.widest, high - low)

    def discard(self, query_id: str) -> None:
        for items, keys in ((self.bounded, self.lows), (self.open_high, self.open_high_lows),
                            (self.open_low, self.open_low_highs)):
            for i, item in enumerate(items):
                if item[-1] == query_id:
                    del items[i], keys[i]
                    return

    def all(self):
        yield from (q for _, _, q in self.bounded)
        yield from (q for _, q in self.open_high)
        yield from (q for _, q in self.open_low)

    def holding(self, value: float) -> list[str]:
        lo = bisect.bisect_left(self.lows, value - self.widest)
        hi = bisect.bisect_right(self.lows, value)
        found = [query_id for _, high, query_id in self.bounded[lo:hi] if value <= high]
        if self.open_high:
            found += [query_id for _, query_id in self.open_high[:bisect.bisect_right(self.open_high_lows, value)]]
        if self.open_low:
            found += [query_id for _, query_id in self.open_low[bisect.bisect_left(self.open_low_highs, value):]]
        return found


class _Bucket:
    """The queries under one pair of terms (or one term, or none): those with a numeric band kept by band, so
    that an event's number picks the few whose band holds it (the rest: every one a candidate). Each query is
    kept with what is left to verify once the presearch found it: the query without what the terms prove
    (``after_pair``), and without the band's inclusive bounds as well (``after_band``), for an event whose
    field held a plain number the band holds; None when nothing is left."""

    __slots__ = ("plain", "banded", "after_pair", "after_band")

    def __init__(self) -> None:
        self.plain: dict[str, Callable | None] = {}
        self.banded: dict[str, _Bands] = {}
        self.after_pair: dict[str, Callable | None] = {}
        self.after_band: dict[str, Callable | None] = {}

    def add(self, query_id: str, band, after_pair, after_band) -> None:
        """``after_pair`` and ``after_band``: what is left to verify (query nodes, compiled when first
        needed), or None."""
        def keep(store: dict, node) -> None:
            store[query_id] = None if node is None else _Deferred(node, store, query_id)

        if band is None:
            keep(self.plain, after_pair)
        else:
            self.banded.setdefault(band[0], _Bands()).add(query_id, band[1], band[2])
            keep(self.after_pair, after_pair)
            keep(self.after_band, after_band)

    def discard(self, query_id: str) -> None:
        self.plain.pop(query_id, None)
        self.after_pair.pop(query_id, None)
        self.after_band.pop(query_id, None)
        for field in list(self.banded):
            self.banded[field].discard(query_id)
            if not len(self.banded[field]):
                del self.banded[field]

    def __bool__(self) -> bool:
        return bool(self.plain or self.banded)

    def collect(self, doc: Document, narrowed: dict[str, Callable | None]) -> None:
        """Add this bucket's candidates for ``doc`` (whose terms hold the bucket's), each with its check."""
        narrowed.update(self.plain)
        for field, bands in self.banded.items():
            value = doc.fields.get(field)
            if type(value) in (int, float) and value == value:  # a plain number (not NaN): the band is decided
                after = self.after_band
                for query_id in bands.holding(value):
                    narrowed[query_id] = after[query_id]
            else:  # not a plain number (a text, a case-different name, missing): the pair's remainder decides
                after = self.after_pair
                for query_id in bands.all():
                    narrowed[query_id] = after[query_id]


_FAST_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "=": operator.eq,
             "<>": operator.ne}


def _required_term(node) -> str | None:
    """The presearch term a document must hold for ``node`` to match it, when holding it is the whole test
    (a word anywhere; a text field equal to a text value)."""
    if isinstance(node, Term) and node.field is None:
        return node.word
    if isinstance(node, Compare) and node.op == "=" and _textual(node.value):
        return f"{node.field.lower()}={node.value.lower()}"
    return None


def compile_query(node) -> Callable[[Document], bool]:
    """A closure ``document -> bool`` equal to ``matches(node, document)``, with the generic dispatch done
    once (the verification step runs it for every candidate)."""
    if isinstance(node, Term):
        term = node.word if node.field is None else None
        if term is not None:
            return lambda d: term in d.terms
        return lambda d: matches(node, d)
    if isinstance(node, Phrase) and node.field is None and len(node.words) == 2:
        bigram = " ".join(node.words)
        return lambda d: bigram in d.bigrams
    if isinstance(node, Phrase):
        required = (max(node.words, key=len) if node.field is None
                    else f"{node.field.lower()}:{max(node.words, key=len)}")
        return lambda d: required in d.terms and matches(node, d)
    if isinstance(node, Compare) and node.op in ("=", "<>") and _textual(node.value):
        # a text field equal to a text value: the document's terms hold field=value (lowercased)
        term = f"{node.field.lower()}={node.value.lower()}"
        if node.op == "=":
            return lambda d: term in d.terms
        return lambda d: term not in d.terms and matches(node, d)
    if isinstance(node, OneOf) and all(_textual(v) for v in node.values):
        terms = frozenset(f"{node.field.lower()}={v.lower()}" for v in node.values)
        return lambda d: not terms.isdisjoint(d.terms)
    if isinstance(node, Compare):
        name, op, value = node.field, node.op, node.value
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        fast = _FAST_OPS[op]

        def compare(d: Document) -> bool:
            v = d.fields.get(name)
            if v is None:
                v = _field(d, name)
                if v is None:
                    return False
            if numeric and type(v) in (int, float):
                return fast(v, value)
            return _compare(v, op, value)
        return compare
    if isinstance(node, And):
        # the parts that are a term the document must hold are one subset test; numeric comparisons are
        # compared inline (their closure only for values that are not plain numbers); the rest are closures
        required, numeric, rest = set(), [], []
        for part in node.parts:
            term = _required_term(part)
            if term is not None:
                required.add(term)
            elif isinstance(part, Compare) and isinstance(part.value, (int, float)) \
                    and not isinstance(part.value, bool):
                numeric.append((part.field, _FAST_OPS[part.op], part.value, compile_query(part)))
            else:
                rest.append(compile_query(part))
        terms, compares, others = frozenset(required), tuple(numeric), tuple(rest)

        def conj(d: Document) -> bool:
            if not terms <= d.terms:
                return False
            fields = d.fields
            for name, fast, value, slow in compares:
                v = fields.get(name)
                if type(v) is int or type(v) is float:
                    if not fast(v, value):
                        return False
                elif not slow(d):
                    return False
            for part in others:
                if not part(d):
                    return False
            return True
        return conj
    if isinstance(node, Or):
        parts = [compile_query(p) for p in node.parts]

        def disj(d: Document) -> bool:
            for part in parts:
                if part(d):
                    return True
            return False
        return disj
    if isinstance(node, Not):
        inner = compile_query(node.part)
        return lambda d: not inner(d)
    return lambda d: matches(node, d)


class _Deferred:
    """A query's check compiled on its first call, which then puts the compiled closure where it was kept
    (``store[key]``): indexing 10,000 stored queries parses them but compiles only the checks events come to
    need (each Python worker of a pipeline builds its own index)."""

    __slots__ = ("node", "store", "key")

    def __init__(self, node, store: dict, key: str) -> None:
        self.node, self.store, self.key = node, store, key

    def __call__(self, doc: Document) -> bool:
        check = compile_query(self.node)
        if self.store.get(self.key) is self:  # not removed (or replaced) meanwhile
            self.store[self.key] = check
        return check(doc)


def _without(node, proven):
    """An AND ``node`` without the parts ``proven(part)`` says are known to hold; None if no part is left."""
    left = tuple(p for p in node.parts if not proven(p))
    if not left:
        return None
    return left[0] if len(left) == 1 else And(left)


def _proves(part, terms: frozenset[str]) -> bool:
    """Whether a document holding one of ``terms`` (the query's presearch terms) holds ``part``: ``part`` is a
    word anywhere, a text field equal to a text, or one of texts, and its own terms are exactly ``terms``."""
    if isinstance(part, OneOf):
        return all(_textual(v) for v in part.values) and anchors(part) == terms
    term = _required_term(part)
    return term is not None and frozenset([term]) == terms


def _band_bound(part, field: str) -> bool:
    """An inclusive numeric bound on ``field``: implied once the field's plain number lies in the band (whose
    ends are the tightest such bounds; strict bounds are not implied by it)."""
    return (isinstance(part, Compare) and part.field == field and part.op in ("<=", ">=")
            and isinstance(part.value, (int, float)) and not isinstance(part.value, bool))


@dataclass
class StoredQuery:
    id: str
    text: str
    node: Any
    anchor: tuple  # ("pair", t1, t2) | ("any", terms) | ("none",)


class QueryIndex:
    """Stored queries, indexed by their presearch terms: a pair of terms both required where the query has
    one, else a set of terms one of which is required, else none (a candidate for every event); under each,
    by the query's numeric band where it has one (see :class:`_Bucket`)."""

    def __init__(self) -> None:
        self.queries: dict[str, StoredQuery] = {}
        self.by_pair: dict[str, dict[str, _Bucket]] = {}
        self.by_term: dict[str, _Bucket] = {}
        self.unanchored = _Bucket()
        self.evaluated = 0  # queries evaluated in full, for the presearch's hit rate

    def __len__(self) -> int:
        return len(self.queries)

    def add(self, query_id: str, text: str) -> StoredQuery:
        node = parse_query(text)
        self.remove(query_id)
        pair = pair_anchor(node)
        if pair is not None:
            anchor: tuple = ("pair", *pair)
            band = numeric_band(node)
            in_pair = lambda p: _required_term(p) in pair  # noqa: E731  (held: the presearch found both terms)
            after_pair = _without(node, in_pair)
            after_band = _without(node, lambda p: in_pair(p) or _band_bound(p, band[0])) if band else None
            self.by_pair.setdefault(pair[0], {}).setdefault(pair[1], _Bucket()).add(
                query_id, band, after_pair, after_band)
        else:
            # one term of a set (or none) found by the presearch: each term's bucket (or the one of the queries
            # without terms) keeps the query by its numeric band too, and with what is left to verify: the
            # query without the part any of those terms proves, without the band's bounds as well
            terms = anchors(node)
            band = numeric_band(node)
            proven = lambda p: terms is not None and _proves(p, terms)  # noqa: E731
            after_terms = _without(node, proven) if isinstance(node, And) else (None if proven(node) else node)
            after_band = _without(node, lambda p: proven(p) or _band_bound(p, band[0])) if band else None
            if terms is None:
                anchor = ("none",)
                self.unanchored.add(query_id, band, after_terms, after_band)
            else:
                anchor = ("any", terms)
                for term in terms:
                    self.by_term.setdefault(term, _Bucket()).add(query_id, band, after_terms, after_band)
        stored = StoredQuery(query_id, text, node, anchor)
        self.queries[query_id] = stored
        return stored

    def remove(self, query_id: str) -> None:
        stored = self.queries.pop(query_id, None)
        if stored is None:
            return
        kind = stored.anchor[0]
        if kind == "pair":
            _, t1, t2 = stored.anchor
            second = self.by_pair[t1]
            second[t2].discard(query_id)
            if not second[t2]:
                del second[t2]
                if not second:
                    del self.by_pair[t1]
        elif kind == "any":
            for term in stored.anchor[1]:
                bucket = self.by_term.get(term)
                if bucket is not None:
                    bucket.discard(query_id)
                    if not bucket:
                        del self.by_term[term]
        else:
            self.unanchored.discard(query_id)

    def candidates(self, doc: Document) -> dict[str, Callable | None]:
        """The queries the presearch cannot rule out for ``doc``, each with what is left to verify (None:
        nothing, the presearch proved the whole query): those without terms, those under a term the document
        holds or a pair of terms it holds both of, each narrowed by its numeric band where it has one."""
        terms = doc.terms
        narrowed: dict[str, Callable | None] = {}
        self.unanchored.collect(doc, narrowed)
        by_term, by_pair = self.by_term, self.by_pair
        for term in by_term.keys() & terms:  # the document's terms some query is indexed by (a C-level join)
            by_term[term].collect(doc, narrowed)
        for term in by_pair.keys() & terms:
            for other, bucket in by_pair[term].items():
                if other in terms:
                    bucket.collect(doc, narrowed)
        return narrowed

    def match(self, event: dict) -> list[str]:
        """The ids of the stored queries ``event`` matches, sorted."""
        doc = Document(event)
        narrowed = self.candidates(doc)
        self.evaluated += len(narrowed)
        hits = [query_id for query_id, check in narrowed.items() if check is None or check(doc)]
        hits.sort()
        return hits
