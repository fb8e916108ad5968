"""StatsD lines: every type, sample rates, tags; bad lines counted, never raised."""

from hypothesis import given, settings
from hypothesis import strategies as st

from freshet.ingest.statsd import parse_datagram


def test_every_type_rates_tags_and_bad_lines_in_one_datagram():
    metrics, bad = parse_datagram(b"gorets:1|c|@0.1\nglork:320|ms\ngaugor:-10|g\ngaugor:333|g\nuniques:765|s\n"
                                  b"h:2.5|h\nd:7|d|#env:prod,db\nnot a line\nx:abc|c\ny:1|zz\nz:nan|c\nr:1|c|@2", 42)
    assert bad == 5
    by = [(m["name"], m["type"], m["value"], m["member"], m["delta"], m["sample_rate"], m["tags"]) for m in metrics]
    assert by == [("gorets", "counter", 1.0, None, False, 0.1, {}), ("glork", "timer", 320.0, None, False, 1.0, {}),
                  ("gaugor", "gauge", -10.0, None, True, 1.0, {}), ("gaugor", "gauge", 333.0, None, False, 1.0, {}),
                  ("uniques", "set", None, "765", False, 1.0, {}), ("h", "histogram", 2.5, None, False, 1.0, {}),
                  ("d", "distribution", 7.0, None, False, 1.0, {"env": "prod", "db": ""})]
    assert all(m["received_ms"] == 42 for m in metrics)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_any_datagram_is_metrics_or_counted_bad_lines(data):
    metrics, bad = parse_datagram(data, 0)
    lines = [x for x in data.decode("utf-8", "replace").split("\n") if x.strip()]
    assert len(metrics) + bad == len(lines)
