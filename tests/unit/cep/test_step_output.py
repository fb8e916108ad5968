"""The stateful step's output frame (``_matches_frame``) as PySpark turns it into MATCH_OUTPUT's Arrow columns:
the alert records ``Match.alert`` gives, field by field, for frames of several sizes concatenated as
``applyInPandasWithState`` concatenates a microbatch's frames (with its padding rows), and for no match."""

from __future__ import annotations

import datetime as dt
import json
import warnings

import pandas as pd
import pytest

from freshet.cep.matcher import CompiledRule, match_events
from freshet.cep.rules import parse_rule
from freshet.pipelines.cep import MATCH_OUTPUT, _matches_frame

RULE = """RULE pay_after_fail
PARTITION BY user, device
MEASURES F.user AS user, P.amount AS amount, COUNT(*) AS rows, P.note AS note
PATTERN (F P)
DEFINE F AS kind = 'failed', P AS kind = 'payment'
WITHIN 1 MINUTE
"""


def _matches() -> list:
    t0 = 1_767_225_600_000
    events = []
    for i in range(40):
        user = ("ann", "bob", "zoë")[i % 3]
        device = i % 2 if i % 5 else "phone"  # keys of an integer and of a text
        events.append({"user": user, "device": device, "kind": "failed", "event_time": t0 + i * 1_000})
        events.append({"user": user, "device": device, "kind": "payment", "amount": 2 ** 70 if i == 7 else i * 10,
                       "note": None if i % 4 else 'say "hi"', "event_time": t0 + i * 1_000 + 7})
    found = match_events(CompiledRule(parse_rule(RULE)), events)
    assert len(found) == 40
    return found


def _spark_rows(frames: list[pd.DataFrame]) -> list[dict]:
    """The frames as PySpark's applyInPandasWithState writes them for the JVM: concatenated with the empty rows
    it pads a batch with, converted to MATCH_OUTPUT's Arrow types."""
    from pyspark.sql.conversion import PandasToArrowConversion
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType, TimestampType

    types = {"string": StringType(), "timestamp": TimestampType(), "int": IntegerType()}
    schema = StructType([StructField(name, types[kind]) for name, kind in
                         (field.strip().split(" ") for field in MATCH_OUTPUT.split(","))])
    padding = pd.DataFrame(dict.fromkeys(schema.names), index=[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # pandas on concatenating all-NA padding rows
        merged = pd.concat([*frames, padding], ignore_index=True)
    batch = PandasToArrowConversion.convert(merged, schema, timezone="UTC", safecheck=True, arrow_cast=True)
    return batch.to_pylist()[:-1]


def _iso(value: dt.datetime) -> str:
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@pytest.mark.parametrize("sizes", [(40,), (1, 39), (3, 0, 17, 20)])
def test_the_output_frames_are_the_alert_records(sizes):
    found = _matches()
    frames, at = [], 0
    for size in sizes:
        if size:  # the step yields no frame for a group without matches
            frames.append(_matches_frame(found[at:at + size]))
        at += size
    rows = _spark_rows(frames)
    assert [{**r, "key": json.loads(r["key"]), "measures": json.loads(r["measures"]),
             "match_start": _iso(r["match_start"]), "match_end": _iso(r["match_end"])} for r in rows] == \
        [json.loads(json.dumps(m.alert())) for m in found]
    frame = frames[0]
    assert [str(t) for t in frame.dtypes] == ["object", "object", "object", "datetime64[ms, UTC]",
                                             "datetime64[ms, UTC]", "int32", "object"]
    assert list(frame.index) == list(range(len(frame)))


def test_no_match_is_an_empty_frame_of_the_output_columns():
    frame = _matches_frame([])
    assert list(frame.columns) == ["rule", "kind", "key", "match_start", "match_end", "rows", "measures"]
    assert len(frame) == 0 and _spark_rows([frame]) == []
