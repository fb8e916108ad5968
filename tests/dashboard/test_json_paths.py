"""JSON paths the search evaluates without jsonpath-ng (a plain path followed directly; everything else
json_paths.compile_path compiles: wildcards, slices, recursive descent, filters with &&, ||, !, =~ and paths on
the right) find exactly what jsonpath-ng finds, in its order, on documents made to hit every corner of RFC 9535's
comparisons: missing members, null, booleans against numbers, strings against numbers, floats, nested members,
lists of non-objects, objects filtered by their values. The number scan (json_paths.NumberNeed) never turns away
a value that matches."""

import json
import random

import pytest

from freshet.dashboard.browse import Filters
from freshet.dashboard.json_paths import compile_path

FILTERS = [
    "$.items[?(@.qty > 5)]", "$.items[?(@.qty >= 5)]", "$.items[?(@.qty < 5)]", "$.items[?(@.qty <= 5)]",
    "$.items[?(@.qty == 5)]", "$.items[?(@.qty != 5)]", "$.items[?(@.qty == 1.5)]", "$.items[?(@.qty > 'm')]",
    "$.items[?(@.sku == 'a')]", "$.items[?(@.sku != 'a')]", "$.items[?(@.sku < 'b')]", "$.items[?(@.qty)]",
    "$.items[?(@.qty == null)]", "$.items[?(@.qty != null)]", "$.items[?(@.qty == true)]",
    "$.items[?(@.qty != false)]", "$.items[?(@.qty >= true)]", "$.items[?(@.x.y > 1)]", "$.items[?(@.x.y)]",
    "$.items[?(@.qty > 1 && @.sku == 'a')]", "$.items[?(@.qty > 1 & @.sku != 'b')]", "$.items[?(@.list[0] == 1)]",
    "$[?(@.qty > 5)]", "$.by_name[?(@.qty < 3)]", "$.deep.items[?(@.sku == 'c')]", "$.items[0].x[?(@ == 1)]",
    "$.items[?(@.qty > 5)].sku",
    # beyond a simple filter: left to jsonpath-ng before
    "$..sku", "$..qty", "$..x.y", "$..items[?(@.qty > 5)]", "$..[?(@.sku == 'a')]", "$..*", "$.items[*].qty",
    "$.*", "$.items[*]", "$.by_name.*.sku", "$.items[1:3]", "$.items[::-1]", "$.items[-1]", "$.items[0,2]",
    "$.items[:]", "$['items','deep']", "$.items[?(@.sku =~ 'a|b')]", "$.items[?(@.sku =~ '^m')]",
    "$.items[?(@.qty =~ '5')]", "$.items[?(!@.qty)]", "$.items[?(!@.x.y)]", "$.items[?(@.qty > @.x.y)]",
    "$.items[?(@.qty == @.sku)]", "$.items[?(@.qty != @.nothing)]", "$.items[?(@.qty > 5 || @.sku == 'a')]",
    "$.items[?(@.qty > 5 || @.sku == 'a' && @.x)]", "$.items[?((@.qty > 1 || @.sku) && !@.x)]",
    "$.items[?(@ == 1)]", "$.items[?(@ == 'a' || @ == 5)]", "$.items[?(@.qty > $.qty)]", "$..[?(@ == true)]",
    "$.deep.items[?(@.list[*] == 1)]", "$.a[?(@.b > 1)][?(@.c > 1)]", "$.items[?(@.qty > 1)][?(@ == 2)]",
]


def value(rng: random.Random):
    return rng.choice([None, True, False, 0, 1, 5, 7, 1.5, -2, "a", "b", "m", "z", "5", [1], {"y": 2}])


def member(rng: random.Random):
    if rng.random() < 0.15:
        return value(rng)  # not an object: filters skip it (or compare it whole with @)
    item = {}
    for name in ("qty", "sku"):
        if rng.random() < 0.8:
            item[name] = value(rng)
    if rng.random() < 0.5:
        item["x"] = {"y": value(rng)} if rng.random() < 0.8 else value(rng)
    if rng.random() < 0.3:
        item["list"] = [value(rng) for _ in range(rng.randrange(3))]
    return item


def document(rng: random.Random):
    doc = {"items": [member(rng) for _ in range(rng.randrange(5))] if rng.random() < 0.9 else member(rng),
           "by_name": {f"k{i}": member(rng) for i in range(rng.randrange(4))},
           "deep": {"items": [member(rng) for _ in range(rng.randrange(4))]}}
    top = member(rng)
    if isinstance(top, dict) and rng.random() < 0.5:  # qty and sku at the top too, for $[?(...)]
        doc.update(top)
    return doc



def test_the_direct_evaluation_finds_what_jsonpath_ng_finds():
    rng = random.Random(49)
    documents = [document(rng) for _ in range(400)]
    for text in FILTERS:
        f = Filters.parse(None, None, None, text)
        assert f.steps is not None or f.compiled is not None, text  # none of them is left to jsonpath-ng
        for doc in documents:
            raw = json.dumps(doc).encode()
            expected = [x.value for x in f.json_path.find(doc)]
            assert f._find(json.loads(raw)) == expected, (text, doc)
            assert f._json_match(raw) == bool(expected), (text, doc)


def test_what_is_left_to_jsonpath_ng():
    from jsonpath_ng.ext import parse

    for text in ("$.items.`len`", "$.items[\\qty]", "$.a.`parent`", "$.items[?(@.qty > 5)].`len`",
                 "$.a | $.b", "$.n * 2"):
        assert compile_path(parse(text)) is None, text
    f = Filters.parse(None, None, None, "$.items.`len` == 2")  # still found, by jsonpath-ng
    assert f.compiled is None and f._json_match(b'{"items": [1, 2]}') and not f._json_match(b'{"items": [1]}')


NUMBERS = ['{"qty": 7}', '{"qty":7}', '{"qty" :\n\t 7 }', '{"qty": 7.0}', '{"qty": 7e0}', '{"qty": 0.7E1}',
           '{"qty": -7}', '{"qty": 70}', '{"qty": 6}', '{"qty": "7"}', '{"qty": true}', '{"qty": null}',
           '{"qty": [7]}', '{"qty": {"qty": 7}}', '{"a": {"qty": 7}, "qty": 1}', '{"qty": 1, "a": {"qty": 7}}',
           '{"note": "qty: 7", "qty": 1}', '{"q\\u0074y": 7}', '{"\\"qty": 7}', '{"qty": 123456789012345678901234567890}',
           '{"items": [{"qty": 9}, {"qty": 1}]}', '{"items": [{"qty": 1, "sku": "a"}]}', '[{"qty": 9}]', "7", "not json",
           '{"qty": 7}garbage', '{"items": [{"qty": 9, "x": {"qty": 1}}]}']


@pytest.mark.parametrize("path", [
    "$.qty > 6", "$.qty >= 7", "$.qty < 0", "$.qty <= -7", "$.qty == 7", "$..qty > 8", "$.a.qty == 7",
    "$.qty > 123456789012345678901234567889", "$.items[?(@.qty > 5)]", "$.items[?(@.qty == 1 && @.sku)]",
    "$..[?(@.qty > 8)]", "$.items[?(@.qty > 5)].x"])
def test_the_number_scan_never_turns_a_match_away(path):
    import pyarrow as pa

    from freshet.dashboard.scan_columns import holding_number

    f = Filters.parse(None, None, None, path)
    assert f.number is not None, path
    plain = Filters.parse(None, None, None, path)
    plain.number = None
    values = [v.encode() for v in NUMBERS]
    for v in values:
        assert f._json_match(v) == plain._json_match(v), (path, v)
        if f.number.found_in(v) is False and b"\\" not in v:
            assert not plain._json_match(v)
    array = pa.array([b"padding"] + values + [None, b""], pa.binary()).slice(1)  # an offset, a null, an empty one
    assert holding_number(array, f.number).to_pylist() == \
        [v is not None and f.number.found_in(v) for v in array.to_pylist()]
    assert sum(holding_number(array, f.number).to_pylist()) < len(values)  # it does turn some away


def test_paths_that_need_no_number():
    for text in ("$.qty != 7", "$.qty == true", '$.qty == "7"', "$.items[?(@.qty > 5 || @.sku)]",
                 "$.items[?(!@.qty)]", "$.items[?(@.qty > @.x)]", "$.items[*]", "$.items.`len` > 1"):
        assert Filters.parse(None, None, None, text).number is None, text


def test_a_boolean_is_no_number():
    """``PATH OP literal`` compares as a filter does (RFC 9535): true is not 1 and is not ordered."""
    f = {text: Filters.parse(None, None, None, text) for text in
         ("$.a == 1", "$.a > 0", "$.a == true", "$.a != 1", "$.a >= true", "$.a < true")}
    assert [t for t, x in f.items() if x._json_match(b'{"a": true}')] == ["$.a == true", "$.a != 1", "$.a >= true"]
    assert [t for t, x in f.items() if x._json_match(b'{"a": 1}')] == ["$.a == 1", "$.a > 0"]


def test_the_number_scan_reads_numbers_near_the_literal_as_exactly_as_json_does():
    """The batch-wide pass judges numbers as floats with a margin; what it lets through is then judged exactly, so
    a number one past a literal beyond a float's precision, or a tiny float, is found as json.loads reads it."""
    from freshet.dashboard.json_paths import NumberNeed

    near = ["9007199254740993", "9007199254740992", "9007199254740991", "1e-320", "0", "-0.0", "1.0000000000000002",
            "1", "0.9999999999999999", "1e308", "123456789012345678901234567890",
            "123456789012345678901234567891"]
    for literal in (9007199254740992, 0, 1, 1.0000000000000002, 1e308, 123456789012345678901234567890, 1e-320):
        for op in ("==", "<", "<=", ">", ">="):
            need = NumberNeed("n", op, literal)
            data = b"".join(b'{"n": %s}' % n.encode() for n in near)
            exact = [i for i, n in enumerate(near)
                     if Filters.parse(None, None, None, f"$.n {op} {literal!r}")._json_match(b'{"n": %s}' % n.encode())]
            spots = need.spots(data)
            found = [i for i, n in enumerate(near) if any(data.index(b'{"n": %s}' % n.encode()) + 1 == s
                                                           for s in spots)]
            assert found == exact, (op, literal)


@pytest.mark.parametrize("path", [
    "$.items[?(@.sku == 'a' || @.qty > 8)]", "$.items[?(@.qty > 8 || @.qty < 0)]",
    "$.items[?(@.qty == 1 && @.sku == 'a' || @.sku == 'b')]", "$..[?(@.sku == 'a' || @.qty == 9)]"])
def test_the_scan_for_either_side_of_an_or_never_turns_a_match_away(path):
    import pyarrow as pa

    from freshet.dashboard import scan_columns

    f = Filters.parse(None, None, None, path)
    assert f.either is not None and f.required is None, path
    plain = Filters.parse(None, None, None, path)
    plain.either = None
    values = [v.encode() for v in NUMBERS + ['{"items": [{"sku": "a"}]}', '{"items": [{"sku": "b", "qty": 1}]}',
                                            '{"items": [{"sku": "\\\\u0061"}]}', '{"note": "a", "items": [{"sku": "c"}]}']]
    assert [f._json_match(v) for v in values] == [plain._json_match(v) for v in values], path
    batch = pa.RecordBatch.from_pylist([{"value": v, "partition": 0, "offset": i, "timestamp": 0, "timestampType": 0}
                                        for i, v in enumerate(values)], schema=scan_columns.schema())
    kept = [m.offset() for m in scan_columns.select(f, batch)]
    assert kept == [i for i, v in enumerate(values) if plain._json_match(v)] and kept, path
    assert Filters.parse(None, None, None, "$.items[?(@.sku == 'a' || @.qty)]").either is None  # a side needing nothing


def test_the_digit_pattern_never_turns_a_match_away():
    """``NumberNeed.candidates`` (Arrow's RE2 over the whole batch, before the number scan) judges a number by its
    digits: every value json.loads reads as satisfying the comparison matches it, a float's rounding included
    (sixteen nines rounding up to the next power of ten), and a name that is not ASCII; and it turns most others
    away."""
    import random

    import pyarrow as pa
    import pyarrow.compute as pc

    from freshet.dashboard.json_paths import NumberNeed

    rng = random.Random(49)
    texts = ["0", "-0", "1", "-1", "9", "10", "99", "100", "101", "999999", "1000000", "1000001", "999999.5",
             "999999.0", "1e6", "1E6", "1e+6", "0.1e7", "-1e6", "1000000e-6", "9.9999999999999999", "99.99999999999999999",
             "999999.99999999999", "0.99999999999999999", "5", "5.5", "5.0", "4.9999999999999999", "12", "12.5", "-12",
             "-12.5", "-13", "-120", "-9.9999999999999999", "123456789012345", "99999999999999.99", "-5.5", "6"]
    texts += [str(rng.randrange(-10 ** rng.randrange(1, 16), 10 ** rng.randrange(1, 16))) for _ in range(300)]
    texts += [f"{rng.uniform(-1e7, 1e7):.{rng.randrange(0, 18)}f}" for _ in range(300)]
    texts += [f"{rng.uniform(-1e7, 1e7):.{rng.randrange(0, 18)}e}" for _ in range(100)]
    literals = [1, 5, 5.5, 6, 10, 12, 12.5, 100, 999999, 999999.5, 1000000, 123456789012345, 8080, -1, -5.5, -12,
                -12.5, -1000000, -707, 1e6]
    for literal in literals:  # each digit of each literal one up and one down, either sign
        digits = str(abs(int(literal)))
        for i, d in enumerate(digits):
            for other in {str(min(int(d) + 1, 9)), str(max(int(d) - 1, 0))}:
                changed = (digits[:i] + other + digits[i + 1:]).lstrip("0") or "0"
                texts += [changed, "-" + changed, changed + ".5"]
    turned_away = 0
    for name in ("n", "prix_€"):
        written = json.dumps(name, ensure_ascii=False)
        values = [f'{{{written}: {t}, "m": 1}}'.encode() for t in texts]
        array = pa.array(values, pa.binary())
        for literal in literals:
            for op in ("==", "<", "<=", ">", ">="):
                need = NumberNeed(name, op, literal)
                exact = Filters.parse(None, None, None, f"$.'{name}' {op} {literal!r}")
                if need.candidates is None:
                    assert op in ("<", "<=") and literal > 0 or op in (">", ">=") and literal < 0, (op, literal)
                    continue
                maybe = pc.match_substring_regex(array, need.candidates).to_pylist()
                for t, v, m in zip(texts, values, maybe):
                    assert m or not exact._json_match(v), (name, op, literal, t)
                turned_away += maybe.count(False)
    assert turned_away > len(texts) * len(literals) * 2  # most values are turned away by their digits


@pytest.mark.parametrize("path, needed", [
    ("$.items[?(@.sku =~ '^plan')]", b"plan"), ("$..[?(@.sku =~ 'or.*der-7$')]", b"der-7"),
    ("$.items[?(@.sku =~ 'x?a\"b')]", b'a\\"b'), ("$.items[?(@.qty > 1 && @.sku =~ 'mm')]", b"mm"),
    ("$.items[?(@.sku =~ 'a|b')]", None), ("$.items[?(@.sku =~ '(?i)plan')]", None), ("$.items[?(@.sku =~ '[ab]')]", None)])
def test_a_regex_filter_scans_for_its_literal_and_never_turns_a_match_away(path, needed):
    """``=~``: the longest run of literals at the pattern's top level is a text every match holds (as JSON writes
    it), so the columnar scan parses only the values holding it (or a backslash); an alternation, a class or an
    ignored case needs nothing."""
    import pyarrow as pa

    from freshet.dashboard import scan_columns

    f = Filters.parse(None, None, None, path)
    assert f.required == needed, path
    plain = Filters.parse(None, None, None, path)
    plain.required = None
    rng = random.Random(7)
    docs = [document(rng) for _ in range(300)]
    for i, doc in enumerate(docs[:60]):  # values that match, near misses, and escapes spelling the literal
        doc["items"] = [{"sku": ["plan-b", "xplan", "order-7", "or der-7", 'a"b', "mm", "Plan", "pl\u0061n"][i % 8],
                         "qty": i % 3}]
    values = [json.dumps(d).encode() for d in docs] + [b'{"items": [{"sku": "\\u0070lan"}]}']
    expected = [i for i, v in enumerate(values) if plain._json_match(v)]
    assert [i for i, v in enumerate(values) if f._json_match(v)] == expected, path
    batch = pa.RecordBatch.from_pylist([{"value": v, "partition": 0, "offset": i, "timestamp": 0, "timestampType": 0}
                                        for i, v in enumerate(values)], schema=scan_columns.schema())
    assert [m.offset() for m in scan_columns.select(f, batch)] == expected, path
    if needed is not None:
        assert expected, path  # the literal's matches are there to be turned away
