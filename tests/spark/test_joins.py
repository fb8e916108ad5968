"""Joins on static data with hand-computed answers, and the click-through join streaming through the broker."""

from collections import Counter
from datetime import datetime, timedelta

from confluent_kafka.admin import AdminClient, NewTopic

from freshet.client.produce import produce_records
from freshet.gen.search_clicks import ClickEvent, SearchEvent, search_clicks
from freshet.pipelines import joins


def t(h, m=0):
    return datetime(2026, 1, 1, h, m)


def test_click_through_static(spark):
    searches = spark.createDataFrame([("s1", "u1", "kafka", t(10, 0)), ("s2", "u2", "kafka", t(10, 5)),
                                      ("s3", "u3", "spark", t(10, 10))], "search_id string, user string, query string, "
                                                                        "search_time timestamp")
    clicks = spark.createDataFrame([("s1", "u1", "/a", t(10, 20)),   # within the hour: a click-through
                                    ("s2", "u2", "/b", t(11, 30)),   # more than an hour later: not one
                                    ("s1", "u1", "/a", t(10, 21))],  # a duplicate click counts once
                                   "search_id string, user string, url string, click_time timestamp")
    rows = joins.click_through(searches, clicks).orderBy("query").collect()
    assert [(r.window_start, r.query, r.searches, r.clicks) for r in rows] == [
        (t(10), "kafka", 2, 1), (t(10), "spark", 1, 0)]
    assert rows[0].ctr == 0.5


def test_repeat_actions_self_join(spark):
    events = spark.createDataFrame([("u1", "a", t(10, 0)), ("u1", "b", t(10, 20)), ("u1", "c", t(11, 0)),
                                    ("u2", "a", t(10, 0))], "user string, query string, search_time timestamp")
    rows = joins.repeat_actions(events).orderBy("first_time").collect()
    assert [(r.user, r.first_query, r.second_query) for r in rows] == [("u1", "a", "b")]


def test_tax_rate_as_of_event_time_is_deterministic(spark):
    rates = spark.createDataFrame([("eu", 0.20, t(0), t(12)), ("eu", 0.25, t(12), None)],
                                  "region string, rate double, valid_from timestamp, valid_to timestamp")
    sales = spark.createDataFrame([(1, "eu", 100.0, t(11, 59)), (2, "eu", 100.0, t(12, 0)), (3, "us", 10.0, t(1))],
                                  "sale_id int, region string, amount double, sale_time timestamp")
    first = sorted(tuple(r) for r in joins.with_tax_rate(sales, rates).collect())
    assert [(r[0], r[5]) for r in first] == [(1, 20.0), (2, 25.0), (3, None)]
    # reprocessing, in another order: the same answer
    again = sorted(tuple(r) for r in joins.with_tax_rate(sales.orderBy("sale_id", ascending=False), rates).collect())
    assert again == first


def test_click_through_streaming_matches_an_independent_count(spark, broker, tmp_path):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for name in ("searches", "clicks"):
        admin.create_topics([NewTopic(name, 2)])[name].result(10)
    events = list(search_clicks(4000, seed=5, every_ms=5000))  # about 5.5 hours of searches
    searches = [e for e in events if isinstance(e, SearchEvent)]
    clicks = [e for e in events if isinstance(e, ClickEvent)]
    produce_records(broker.bootstrap, "searches", ((e.user.encode(), e.value(), e.ts_ms) for e in searches))
    produce_records(broker.bootstrap, "clicks", ((e.user.encode(), e.value(), e.ts_ms) for e in sorted(
        clicks, key=lambda c: c.ts_ms)))

    def stream(topic):
        return (spark.readStream.format("freshet").option("kafka.bootstrap.servers", broker.bootstrap)
                .option("subscribe", topic).option("startingOffsets", "earliest").load())

    result = joins.click_through(joins.parse_json(stream("searches"), joins.SEARCH_SCHEMA, "search_time"),
                                 joins.parse_json(stream("clicks"), joins.CLICK_SCHEMA, "click_time"))
    out = str(tmp_path / "ctr")
    query = (result.writeStream.outputMode("append").format("parquet").option("path", out)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination(600)
    assert query.exception() is None
    got = {(r.window_start, r.query): (r.searches, r.clicks) for r in spark.read.parquet(out).collect()}
    # independently: per hour of search time and query, searches and clicks within the hour
    click_at = {c.search_id: c.ts_ms for c in clicks}
    expected: Counter = Counter()
    clicked: Counter = Counter()
    for s in searches:
        hour = datetime(1970, 1, 1) + timedelta(milliseconds=s.ts_ms // 3_600_000 * 3_600_000)
        expected[(hour, s.query)] += 1
        if s.search_id in click_at and 0 <= click_at[s.search_id] - s.ts_ms <= 3_600_000:
            clicked[(hour, s.query)] += 1
    # append mode emits an hour once the watermark has passed it: compare the hours it emitted
    assert got and all(got[k] == (expected[k], clicked[k]) for k in got)
    assert len(got) >= len(expected) - 2 * len({q for _, q in expected})  # all but the last open hours
