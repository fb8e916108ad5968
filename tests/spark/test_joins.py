"""Joins on static data with hand-computed answers, and the click-through join streaming through the broker."""

from collections import Counter
from datetime import datetime, timedelta

import pytest
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


def load_search_clicks(broker, searches_topic, clicks_topic, n, seed, every_ms=5000):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for name in (searches_topic, clicks_topic):
        admin.create_topics([NewTopic(name, 2)])[name].result(10)
    events = list(search_clicks(n, seed=seed, every_ms=every_ms))  # 4000 every 5 s: about 5.5 hours of searches
    searches = [e for e in events if isinstance(e, SearchEvent)]
    clicks = [e for e in events if isinstance(e, ClickEvent)]
    produce_records(broker.bootstrap, searches_topic, ((e.user.encode(), e.value(), e.ts_ms) for e in searches))
    produce_records(broker.bootstrap, clicks_topic, ((e.user.encode(), e.value(), e.ts_ms) for e in sorted(
        clicks, key=lambda c: c.ts_ms)))
    return searches, clicks


def test_click_through_streaming_matches_an_independent_count(engine, broker, tmp_path):
    """The click-through pipeline over two topics, on the local session and on the cluster."""
    from freshet.pipelines.runner import PipelineSpec
    from freshet.testing.parquet import committed_rows

    searches_topic, clicks_topic = f"searches-{engine.name}", f"clicks-{engine.name}"
    searches, clicks = load_search_clicks(broker, searches_topic, clicks_topic, n=4000, seed=5)
    out = str(tmp_path / "ctr")
    engine.run(PipelineSpec("click-through", f"{searches_topic},{clicks_topic}", f"parquet:{out}", broker.bootstrap,
                            str(tmp_path / "ck"), lateness="10 minutes", available_now=True))
    check_ctr(committed_rows(out), searches, clicks)


def check_ctr(rows, searches, clicks):
    got = {(r.window_start, r.query): (r.searches, r.clicks) for r in rows}
    assert len(got) == len(rows), "an hour was written twice"
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


# a Spark driver started twice (once killed mid-stream): 20-60 s each on 2 quiet cores, minutes on a busy machine
@pytest.mark.timeout(1500)
def test_click_through_under_kill_9_of_the_driver(broker, tmp_path):
    """freshet run click-through killed -9 mid-stream: the join and aggregation state come
    back from the checkpoint; every closed hour is written once, with the right counts."""
    import os
    import subprocess
    import sys

    from freshet.testing.crash import kill_mid_stream
    from freshet.testing.parquet import committed_rows

    searches_topic, clicks_topic = f"searches-k{os.getpid()}", f"clicks-k{os.getpid()}"
    # 3000 searches 10 s apart: 8.3 hours, as many hours as 6000 every 5 s with half the rows to join (a
    # stateful microbatch on 2 shared cores takes a few hundred rows a second)
    searches, clicks = load_search_clicks(broker, searches_topic, clicks_topic, n=3000, seed=11, every_ms=10_000)
    out, checkpoint = str(tmp_path / "ctr"), str(tmp_path / "ck")
    run = [sys.executable, "-m", "freshet.cli.main", "run", "click-through", "--from",
           f"{searches_topic},{clicks_topic}", "--to", f"parquet:{out}", "--checkpoint", checkpoint,
           "--lateness", "10 minutes", "--bootstrap", broker.bootstrap]
    # small microbatches until the kill; the restart takes the rest in one (each microbatch of a stateful
    # query costs seconds on 2 shared cores). Two shuffle partitions, as the tests' shared session has: each batch
    # loads and commits six state stores a partition here (the deduplication's, the join's four, the count's),
    # half as many as with freshet run's four partitions (the restart takes the number from the checkpoint)
    cmd = run + ["--trigger-seconds", "0.5", "--max-offsets-per-trigger", "600",
                 "--spark-conf", "spark.sql.shuffle.partitions=2"]
    assert kill_mid_stream(cmd, checkpoint, targets=(2,)) == 1
    # traffic goes on: after a restart Spark holds the watermark until every input has seen new data
    # (an input idle since before the restart counts as time 0), so the last hours close on new events
    later = max(s.ts_ms for s in searches) + 2 * 3_600_000
    search, click = SearchEvent("s-later", "u1", "watermark", later), ClickEvent("s-later", "u1", "/w", later + 1000)
    produce_records(broker.bootstrap, searches_topic, [(b"u1", search.value(), search.ts_ms)])
    produce_records(broker.bootstrap, clicks_topic, [(b"u1", click.value(), click.ts_ms)])
    searches, clicks = searches + [search], clicks + [click]
    final = subprocess.run(run + ["--available-now"], capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-3000:]
    check_ctr(committed_rows(out), searches, clicks)  # through _spark_metadata: committed files only
