"""JSON paths the search evaluates without jsonpath-ng (a plain path followed directly; a filter over a plain path
whose conditions compare plain relative paths with literals) find exactly what jsonpath-ng finds, on documents
made to hit every corner of RFC 9535's comparisons: missing members, null, booleans against numbers, strings
against numbers, floats, nested members, lists of non-objects, objects filtered by their values."""

import json
import random

from freshet.dashboard.browse import Filters, filter_steps

FILTERS = [
    "$.items[?(@.qty > 5)]", "$.items[?(@.qty >= 5)]", "$.items[?(@.qty < 5)]", "$.items[?(@.qty <= 5)]",
    "$.items[?(@.qty == 5)]", "$.items[?(@.qty != 5)]", "$.items[?(@.qty == 1.5)]", "$.items[?(@.qty > 'm')]",
    "$.items[?(@.sku == 'a')]", "$.items[?(@.sku != 'a')]", "$.items[?(@.sku < 'b')]", "$.items[?(@.qty)]",
    "$.items[?(@.qty == null)]", "$.items[?(@.qty != null)]", "$.items[?(@.qty == true)]",
    "$.items[?(@.qty != false)]", "$.items[?(@.qty >= true)]", "$.items[?(@.x.y > 1)]", "$.items[?(@.x.y)]",
    "$.items[?(@.qty > 1 && @.sku == 'a')]", "$.items[?(@.qty > 1 & @.sku != 'b')]", "$.items[?(@.list[0] == 1)]",
    "$[?(@.qty > 5)]", "$.by_name[?(@.qty < 3)]", "$.deep.items[?(@.sku == 'c')]", "$.items[0].x[?(@ == 1)]",
    "$.items[?(@.qty > 5)].sku",
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
    direct = 0
    for text in FILTERS:
        f = Filters.parse(None, None, None, text)
        direct += f.filtered is not None
        for doc in documents:
            raw = json.dumps(doc).encode()
            expected = [x.value for x in f.json_path.find(doc)]
            assert f._find(json.loads(raw)) == expected, (text, doc)
            assert f._json_match(raw) == bool(expected), (text, doc)
    assert direct == len(FILTERS) - 2  # all but @ alone and a path after the filter take the direct way


def test_what_is_left_to_jsonpath_ng():
    from jsonpath_ng.ext import parse

    for text in ("$..sku", "$.items[*].qty", "$.items[?(@.sku =~ 'a.*')]", "$.items[?(!@.qty)]",
                 "$.items[?(@.qty > @.min)]", "$.items[?(@.qty > 5 || @.sku == 'a')]", "$.items[?(@ == 1)]",
                 "$.items[?(@.qty > 5)].sku", "$.a[?(@.b > 1)][?(@.c > 1)]"):
        assert filter_steps(parse(text)) is None, text
