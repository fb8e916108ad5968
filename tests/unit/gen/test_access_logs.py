import re
from itertools import islice

from freshet.gen.access_logs import AccessLogGenerator

COMBINED = re.compile(r'^(\S+) - - \[(\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000)\] "(GET|POST) (\S+) HTTP/1.1" '
                      r'(\d{3}) (\d+) "([^"]*)" "([^"]*)"$')


def test_lines_are_apache_combined_format():
    events = list(islice(AccessLogGenerator(seed=3).events(), 2000))
    for e in events:
        m = COMBINED.match(e.line)
        assert m, e.line
        assert m.group(1) == e.client_ip


def test_disorder_fractions_and_determinism():
    gen = AccessLogGenerator(seed=7, rate_per_s=100, out_of_order=0.2, late=0.05, start_ms=1_000_000_000)
    events = list(islice(gen.events(), 10000))
    running_max, behind, late = 0, 0, 0
    for e in events:
        if e.timestamp_ms < running_max:
            behind += 1
            if running_max - e.timestamp_ms >= 120_000:
                late += 1
        running_max = max(running_max, e.timestamp_ms)
    assert 0.15 < behind / len(events) < 0.3
    assert 0.03 < late / len(events) < 0.07
    again = list(islice(AccessLogGenerator(seed=7, rate_per_s=100, out_of_order=0.2, late=0.05,
                                           start_ms=1_000_000_000).events(), 100))
    assert [e.line for e in again] == [e.line for e in events[:100]]
