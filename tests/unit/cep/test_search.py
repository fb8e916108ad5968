"""Stored queries: what they mean, and the indexed percolator against a brute-force scan."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freshet.cep.expressions import RuleSyntaxError
from freshet.cep.search import Document, QueryIndex, matches, parse_query

LISTING = {"city": "Delft", "price": 385000, "bedrooms": 3,
           "title": "Canal view house close to the station", "features": ["garden", "balcony"],
           "agent": {"name": "Van Dam Makelaars"}}


@pytest.mark.parametrize("query, expected", [
    ("city = Delft AND price < 400000", True),
    ("city = delft AND price < 300000", False),
    ("canal", True),
    ('"close to the station"', True),
    ('"station close"', False),
    ("garden AND NOT leasehold", True),
    ("garden -leasehold", False),  # '-leasehold' is a word to look for, not NOT
    ("title:canal", True),
    ("city:canal", False),
    ('title:"canal view"', True),
    ("city IN (Amsterdam, Utrecht)", False),
    ("city IN (Amsterdam, 'Delft')", True),
    ("bedrooms >= 3 AND (garden OR pool)", True),
    ("bedrooms > 3 OR pool", False),
    ("agent.name:makelaars", True),
    ("price = 385000", True),
    ("price <> 385000", False),
    ("canal view delft", True),  # adjacent terms: AND
    ("canal view rotterdam", False),
])
def test_query_meaning(query, expected):
    assert matches(parse_query(query), Document(LISTING)) is expected
    index = QueryIndex()
    index.add("q", query)
    assert index.match(LISTING) == (["q"] if expected else [])


@pytest.mark.parametrize("query, message", [
    ("", "empty"), ("city =", "expected a value"), ("(canal", "expected )"), ("canal AND", "expected a term"),
    ("city IN Delft", "expected ( after IN"), ('""', "no words"), ("a ) b", "unexpected ')'"),
])
def test_bad_queries_say_what_is_wrong(query, message):
    with pytest.raises(RuleSyntaxError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_query(query)


def test_the_presearch_evaluates_few_queries():
    index = QueryIndex()
    for i in range(5000):
        index.add(f"q{i}", f"city = city{i} AND price < {100000 + i}")
    index.add("delft", "city = Delft AND price < 400000")
    assert index.match(LISTING) == ["delft"]
    assert index.evaluated == 1


WORDS = ["canal", "garden", "delft", "view", "station", "house", "pool"]
FIELDS = ["city", "title", "kind"]


def query_texts():
    word = st.sampled_from(WORDS)
    value = st.one_of(st.sampled_from(WORDS), st.integers(0, 5).map(str), st.sampled_from(["'Delft'", "2.0", "'02'"]))
    leaf = st.one_of(
        word,
        st.tuples(word, word).map(lambda t: f'"{t[0]} {t[1]}"'),
        st.tuples(st.sampled_from(FIELDS + ["rooms"]), word).map(lambda t: f"{t[0]}:{t[1]}"),
        st.tuples(st.sampled_from(FIELDS + ["rooms"]), st.sampled_from(["=", "<>", "<", ">="]), value).map(
            lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(st.sampled_from(FIELDS), st.lists(value, min_size=1, max_size=3)).map(
            lambda t: f"{t[0]} IN ({', '.join(t[1])})"),
    )
    return st.recursive(leaf, lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR", ""]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda q: f"NOT {q}")), max_leaves=5)


documents = st.fixed_dictionaries({
    "city": st.sampled_from(["Delft", "delft", "Utrecht", "pool", "2", "02", "2.0"]),
    "title": st.lists(st.sampled_from(WORDS), max_size=5).map(" ".join),
    "kind": st.one_of(st.sampled_from(WORDS), st.integers(0, 3)),
    "rooms": st.one_of(st.integers(0, 5), st.floats(0, 5).map(lambda f: round(f, 1)), st.just("2")),
})


@settings(max_examples=150, deadline=None)
@given(st.lists(query_texts(), min_size=1, max_size=30), st.lists(documents, min_size=1, max_size=10))
def test_indexed_matching_equals_a_brute_force_scan(queries, docs):
    index = QueryIndex()
    parsed = {}
    for i, text in enumerate(queries):
        index.add(f"q{i}", text)
        parsed[f"q{i}"] = parse_query(text)
    for i in range(0, len(queries), 3):  # removed queries match nothing
        index.remove(f"q{i}")
        del parsed[f"q{i}"]
    for doc in docs:
        scan = sorted(q for q, node in parsed.items() if matches(node, Document(doc)))
        assert index.match(doc) == scan


def test_price_bands_narrow_the_candidates_without_losing_a_match():
    import random

    rng = random.Random(4)
    index, parsed = QueryIndex(), {}
    for i in range(2000):
        low = rng.randint(1, 9) * 100_000
        op_low, op_high = rng.choice([">=", ">"]), rng.choice(["<=", "<"])
        text = (f"city = {rng.choice(['Delft', 'Leiden'])} AND kind = {rng.choice(['villa', 'studio'])} AND "
                f"price {op_low} {low} AND price {op_high} {low + 100_000}")
        index.add(f"q{i}", text)
        parsed[f"q{i}"] = parse_query(text)
    docs = [{"city": c, "kind": k, "price": p} for c in ("Delft", "Leiden") for k in ("villa", "studio")
            for p in (100_000, 150_000, 500_000, 500_000.0, "500000", None, True, 999_999)]
    for doc in docs:
        assert index.match(doc) == sorted(q for q, node in parsed.items() if matches(node, Document(doc)))
    index.evaluated = 0
    index.match({"city": "Delft", "kind": "villa", "price": 450_000})
    assert index.evaluated < 150  # of the ~500 queries under Delft and villa, those whose band holds 450,000


def test_a_band_proven_by_the_presearch_still_checks_what_it_does_not_prove():
    """Candidates found through a pair of terms and a band skip re-checking those; strict bounds, a second
    bound on the field, other fields and a case-different field name are still checked."""
    texts = {
        "inclusive": "city = Delft AND kind = villa AND price >= 200000 AND price <= 300000",
        "strict": "city = Delft AND kind = villa AND price > 200000 AND price < 300000",
        "two_lows": "city = Delft AND kind = villa AND price >= 100000 AND price >= 250000 AND price <= 300000",
        "rooms": "city = Delft AND kind = villa AND price >= 200000 AND price <= 300000 AND rooms >= 3",
        "word": "city = Delft AND kind = villa AND garden AND price <= 300000",
    }
    index = QueryIndex()
    for name, text in texts.items():
        index.add(name, text)
    docs = [{"city": "Delft", "kind": "villa", "price": p, "rooms": r, "title": t}
            for p in (200_000, 250_000, 300_000, 299_999.5) for r in (2, 3) for t in ("garden", "")]
    docs += [{"city": "Delft", "kind": "villa", "Price": 250_000, "rooms": 3, "title": "garden"},
             {"city": "Delft", "kind": "villa", "price": "250000", "rooms": 3}]
    for doc in docs:
        expected = sorted(q for q, text in texts.items() if matches(parse_query(text), Document(doc)))
        assert index.match(doc) == expected
    assert index.match(docs[0]) == ["inclusive", "word"]  # 200,000: on the inclusive bounds, not the strict


def test_queries_of_one_term_or_none_are_narrowed_by_their_band_and_what_the_term_proves():
    """Broad searches (a price ceiling alone, a few cities, a word, with a bound): the band picks the candidates
    among the queries without terms too, and a query whose remaining parts the term and band prove is not
    verified at all; the matches are a brute-force scan's."""
    import random

    rng = random.Random(9)
    texts = {}
    for i in range(300):
        ceiling = rng.randint(1, 9) * 100_000
        texts[f"q{i}"] = rng.choice([
            f"price <= {ceiling} AND bedrooms >= {rng.randint(1, 4)}",
            f"city IN ('Delft', '{rng.choice(['Leiden', 'Gouda'])}') AND price <= {ceiling}",
            f"garden AND bedrooms >= {rng.randint(1, 4)}",
            f"city = 'Delft' OR (garden AND price < {ceiling})",
            f"NOT garden AND price > {ceiling}",
        ])
    index = QueryIndex()
    for name, text in texts.items():
        index.add(name, text)
    docs = [{"city": c, "price": p, "bedrooms": b, "title": t}
            for c in ("Delft", "Gouda", "Utrecht") for p in (50_000, 450_000, 450_000.0, "450000", None, 950_000)
            for b in (1, 3, "3") for t in ("garden", "Garden shed", "")]
    for doc in docs:
        assert index.match(doc) == sorted(q for q, text in texts.items() if matches(parse_query(text), Document(doc)))
    proven = [q for q, text in texts.items() if text.startswith(("city IN", "garden"))]
    index.match({"city": "Delft", "price": 100_000, "bedrooms": 5, "title": "garden"})  # compiles what is left
    for query_id in proven:
        for bucket in (index.by_term["city=delft"], index.by_term["garden"]):
            if query_id in bucket.after_band:
                assert bucket.after_band[query_id] is None, texts[query_id]  # the term and the band prove it all
    index.evaluated = 0
    index.match({"city": "Utrecht", "price": 850_000, "bedrooms": 1, "title": ""})
    unanchored = [t for t in texts.values() if t.startswith(("price", "NOT"))]
    assert index.evaluated < len(unanchored) * 0.6  # the ceilings below 850,000 and the floors above are not candidates
