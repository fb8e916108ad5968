"""The StatsD rollup on a static DataFrame of metrics as the ingest server writes them (its own parser), with
the answers StatsD's flush would give, worked out by hand."""

import orjson
import pytest

from freshet.ingest.statsd import parse_datagram
from freshet.pipelines import statsd_rollup

BASE = 1_800_000_000_000  # a multiple of 10 s: windows start here and 10 s later


def records(datagrams):
    out = []
    for at, data in datagrams:
        metrics, bad = parse_datagram(data, BASE + at)
        out += [(orjson.dumps(m), len(out) + i) for i, m in enumerate(metrics)]  # offsets: arrival order
    return out


@pytest.fixture(scope="module")
def rolled(spark):
    raw = spark.createDataFrame(records([
        (1_000, b"hits:1|c\nhits:2|c|@0.5\nhits:1|c|#env:prod,db:a"),  # 1 + 2/0.5 = 5; tagged series apart
        (2_000, b"hits:1|c|#db:a,env:prod\nload:3|g\nload:+2|g"),    # same tags, other order: same series
        (3_000, b"load:7|g\nload:-1|g\nlatency:10|ms\nlatency:20|ms\nlatency:30|ms\nlatency:40|ms"),
        (4_000, b"users:alice|s\nusers:bob|s\nusers:alice|s\nnot a metric\nqueue:-4|g"),
        (12_000, b"hits:3|c\nlatency:100|ms"),                      # the next window
    ]), "value binary, offset long")
    rows = statsd_rollup.rollup(statsd_rollup.parse(raw)).collect()
    return {(r.window_start.timestamp() * 1000 - BASE, r.name, r.tags): r for r in rows}


def test_counters_are_scaled_by_sample_rate_and_given_per_second(rolled):
    hits = rolled[(0, "hits", "{}")]
    assert (hits.type, hits.samples, hits.value, hits.rate) == ("counter", 2, 5.0, 0.5)
    tagged = rolled[(0, "hits", '{"db":"a","env":"prod"}')]
    assert (tagged.samples, tagged.value) == (2, 2.0)
    assert rolled[(10_000, "hits", "{}")].value == 3.0


def test_gauges_apply_sets_and_changes_in_order(rolled):
    load = rolled[(0, "load", "{}")]
    assert load.type == "gauge" and load.value == 6.0  # set 3, +2 (5), set 7, -1: 6 at the window's end
    assert rolled[(0, "queue", "{}")].value == -4.0  # only a change in the window: applied to 0


def test_timers_give_count_extremes_mean_and_percentiles(rolled):
    latency = rolled[(0, "latency", "{}")]
    assert (latency.samples, latency.min, latency.max, latency.mean) == (4, 10.0, 40.0, 25.0)
    assert latency.p50 in (20.0, 30.0) and latency.p99 == 40.0 and latency.rate is None
    assert rolled[(10_000, "latency", "{}")].p90 == 100.0


def test_sets_count_distinct_members(rolled):
    users = rolled[(0, "users", "{}")]
    assert (users.type, users.value, users.samples) == ("set", 2.0, 3)
