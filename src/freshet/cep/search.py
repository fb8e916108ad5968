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
queries from that index; only candidates (and the few queries with no such terms, like a lone range
filter or a NOT) are evaluated in full.
"""

from __future__ import annotations

import re
from collections import defaultdict
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

    __slots__ = ("fields", "field_words", "terms", "all_words")

    def __init__(self, event: dict) -> None:
        self.fields: dict[str, Any] = {}
        _flatten(event, "", self.fields)
        self.field_words: dict[str, list[str]] = {}
        terms: set[str] = set()
        all_words: list[list[str]] = []
        for name, value in self.fields.items():
            if isinstance(value, str):
                found = words(value)
                self.field_words[name] = found
                all_words.append(found)
                terms.update(found)
                lname = name.lower()
                terms.update(f"{lname}:{w}" for w in found)
                terms.add(f"{lname}={value.lower()}")
            elif isinstance(value, (int, float)):  # bool too: field:true
                terms.update(f"{name.lower()}:{w}" for w in words(str(value)))
        self.terms = terms
        self.all_words = all_words


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


@dataclass
class StoredQuery:
    id: str
    text: str
    node: Any


class QueryIndex:
    """Stored queries, indexed by their presearch terms."""

    def __init__(self) -> None:
        self.queries: dict[str, StoredQuery] = {}
        self.by_term: dict[str, set[str]] = defaultdict(set)
        self.unanchored: set[str] = set()
        self.evaluated = 0  # queries evaluated in full, for the presearch's hit rate

    def __len__(self) -> int:
        return len(self.queries)

    def add(self, query_id: str, text: str) -> StoredQuery:
        node = parse_query(text)
        self.remove(query_id)
        stored = StoredQuery(query_id, text, node)
        self.queries[query_id] = stored
        terms = anchors(node)
        if terms is None:
            self.unanchored.add(query_id)
        else:
            for term in terms:
                self.by_term[term].add(query_id)
        return stored

    def remove(self, query_id: str) -> None:
        stored = self.queries.pop(query_id, None)
        if stored is None:
            return
        terms = anchors(stored.node)
        if terms is None:
            self.unanchored.discard(query_id)
        else:
            for term in terms:
                ids = self.by_term.get(term)
                if ids is not None:
                    ids.discard(query_id)
                    if not ids:
                        del self.by_term[term]

    def candidates(self, doc: Document) -> set[str]:
        found = set(self.unanchored)
        by_term = self.by_term
        for term in doc.terms:
            ids = by_term.get(term)
            if ids:
                found |= ids
        return found

    def match(self, event: dict) -> list[str]:
        """The ids of the stored queries ``event`` matches, sorted."""
        doc = Document(event)
        hits = []
        candidates = self.candidates(doc)
        self.evaluated += len(candidates)
        for query_id in candidates:
            if matches(self.queries[query_id].node, doc):
                hits.append(query_id)
        return sorted(hits)
