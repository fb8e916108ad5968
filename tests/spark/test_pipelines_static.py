"""Each pipeline function on a small static DataFrame with answers computed by hand."""

from datetime import datetime, timezone

import pytest

from freshet.pipelines import access_logs as al


def line(ip, hh, mm, ss, path="/", status=200, size="100"):
    return (f'{ip} - - [22/Nov/2026:{hh:02d}:{mm:02d}:{ss:02d} +0000] "GET {path} HTTP/1.1" {status} {size} '
            f'"-" "curl/8.4.0"').encode()


LINES = [
    line("10.0.0.1", 12, 0, 5, "/", 200, "100"),
    line("10.0.0.2", 12, 0, 30, "/a", 200, "300"),
    line("10.0.0.1", 12, 1, 10, "/b", 500, "50"),
    line("10.0.0.3", 12, 3, 0, "/", 304, "-"),
    b"this is not an access log line",
    line("10.0.0.1", 12, 40, 0, "/c", 200, "10"),
]


def t(hh, mm, ss=0):
    return datetime(2026, 11, 22, hh, mm, ss)


@pytest.fixture(scope="module")
def events(spark):
    raw = spark.createDataFrame([(v,) for v in LINES], "value binary")
    return al.parse(raw)


def test_parse_drops_malformed_lines_and_reads_fields(events):
    rows = events.orderBy("event_time").collect()
    assert len(rows) == 5
    first = rows[0]
    assert (first.client_ip, first.method, first.path, first.status, first.size) == ("10.0.0.1", "GET", "/", 200, 100)
    assert first.event_time == t(12, 0, 5)
    assert [r.size for r in rows if r.status == 304] == [0]  # "-" is 0 bytes


def test_requests_per_minute(events):
    rows = al.requests_per_minute(events).orderBy("window_start").collect()
    assert [(r.window_start, r.requests, r.bytes, r.server_errors) for r in rows] == [
        (t(12, 0), 2, 400, 0), (t(12, 1), 1, 50, 1), (t(12, 3), 1, 0, 0), (t(12, 40), 1, 10, 0)]


def test_hopping_average(events):
    rows = {r.window_start: r for r in al.hopping_average(events).collect()}
    # the 5-minute window 11:57-12:02 holds the first three requests; 12:00-12:05 holds four
    assert rows[t(11, 57)].avg_requests_per_minute == pytest.approx(3 / 5)
    assert rows[t(12, 0)].avg_requests_per_minute == pytest.approx(4 / 5)
    assert rows[t(12, 0)].avg_size == pytest.approx((100 + 300 + 50 + 0) / 4)
    # windows start every minute: 11:56..12:03 cover the first four requests, 12:36..12:40 the last
    assert len(rows) == 8 + 5


def test_size_percentiles(events):
    rows = al.size_percentiles(events).orderBy("window_start").collect()
    assert [(r.window_start, r.p50_size, r.p99_size, r.requests) for r in rows] == [
        (t(12, 0), 50, 300, 4), (t(12, 40), 10, 10, 1)]


def test_unique_users_exact_and_approximate(events):
    [row] = al.unique_users_per_hour(events).collect()
    assert (row.window_start, row.unique_exact, row.unique_approx, row.approx_error) == (t(12, 0), 3, 3, 0)


def test_sessions_split_on_thirty_minutes_of_inactivity(events):
    rows = al.sessions(events).orderBy("client_ip", "session_start").collect()
    assert [(r.client_ip, r.session_start, r.session_end, r.requests) for r in rows] == [
        ("10.0.0.1", t(12, 0, 5), t(12, 31, 10), 2),
        ("10.0.0.1", t(12, 40), t(13, 10), 1),
        ("10.0.0.2", t(12, 0, 30), t(12, 30, 30), 1),
        ("10.0.0.3", t(12, 3), t(12, 33), 1),
    ]


def test_trend_flags_spikes_and_drops(spark):
    counts = spark.createDataFrame([(t(12, 0), 10), (t(12, 1), 40), (t(12, 2), 5), (t(12, 3), 6)],
                                   "window_start timestamp, requests long")
    rows = al.trend(counts).orderBy("window_start").collect()
    assert [(r.previous, r.flag) for r in rows] == [(None, None), (10, "spike"), (40, "drop"), (5, None)]
    assert rows[1].ratio == pytest.approx(4.0)


def test_requests_trend_on_a_static_frame_is_trend_over_requests_per_minute(events):
    rows = al.requests_trend(events).orderBy("window_start").collect()
    assert [(r.window_start, r.requests, r.previous, r.flag) for r in rows] == [
        (t(12, 0), 2, None, None), (t(12, 1), 1, 2, None), (t(12, 3), 1, 1, None), (t(12, 40), 1, 1, None)]
    assert rows[1].ratio == pytest.approx(0.5)


def test_timestamps_are_utc(events):
    assert events.collect()[0].event_time.tzinfo is None  # session time zone is UTC
    assert datetime(2026, 11, 22, 12, 0, 5, tzinfo=timezone.utc).timestamp() == \
        events.orderBy("event_time").first().event_time.replace(tzinfo=timezone.utc).timestamp()


def test_count_windows_every_n_events_per_key(spark):
    from freshet.pipelines.event_windows import count_windows

    lines = [line("10.0.0.1", 12, m, 0, size=str(10 * m)) for m in range(7)] + [line("10.0.0.2", 12, 0, 1)]
    events = al.parse(spark.createDataFrame([(v,) for v in lines], "value binary"))
    rows = count_windows(events, n=3).orderBy("client_ip", "window_index").collect()
    assert [(r.client_ip, r.window_index, r.first_event_time, r.last_event_time, r.events, r.bytes) for r in rows] == [
        ("10.0.0.1", 0, t(12, 0), t(12, 2), 3, 0 + 10 + 20),
        ("10.0.0.1", 1, t(12, 3), t(12, 5), 3, 30 + 40 + 50),
    ]  # the seventh event and 10.0.0.2's single one wait for their windows to fill


def test_sliding_event_windows_count_events_within_the_span_before_each(spark):
    from freshet.pipelines.event_windows import sliding_event_windows

    lines = [line("10.0.0.1", 12, m, 0, size="1") for m in (0, 4, 9, 30, 31)] + [line("10.0.0.1", 12, 31, 0, size="5")]
    raw = spark.createDataFrame([(v, 0, i) for i, v in enumerate(lines)], "value binary, partition int, offset long")
    rows = sliding_event_windows(al.parse(raw), span_seconds=600).orderBy("offset").collect()
    # two requests in the same second (log time has whole seconds) are two results, named by offset
    assert [(r.event_time, r.offset, r.events_in_span, r.bytes_in_span) for r in rows] == [
        (t(12, 0), 0, 1, 1), (t(12, 4), 1, 2, 2), (t(12, 9), 2, 3, 3), (t(12, 30), 3, 1, 1), (t(12, 31), 4, 2, 2),
        (t(12, 31), 5, 3, 7)]


def test_sliding_event_windows_need_the_records_partition_and_offset(spark):
    from freshet.pipelines.event_windows import sliding_event_windows

    events = al.parse(spark.createDataFrame([(line("10.0.0.1", 12, 0, 0),)], "value binary"))
    with pytest.raises(ValueError, match="partition and offset"):
        sliding_event_windows(events)
