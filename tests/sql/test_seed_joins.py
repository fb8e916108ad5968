"""The seed's joins in SQL against the Python pipelines on the same generated data: the click-through rate (searches
with a click within the hour, a semi join, so that a repeated click counts once; counted per query and hour), and the home timeline (tweets joined
with follows) as two chained persistent queries, since Spark joins no two streaming aggregations."""

import json

from freshet.client.admin import TopicAdmin
from freshet.pipelines import joins
from freshet.testing.polling import wait_for

from .helpers import produce


def _frames(spark, values: list[bytes]):
    return spark.createDataFrame([(v,) for v in values], "value binary")


def test_click_through_rate_in_sql_matches_the_pipeline(sql, broker, topic_name, spark):
    from freshet.gen.search_clicks import ClickEvent, SearchEvent, search_clicks

    events = list(search_clicks(600, seed=5, every_ms=30_000))  # five hours of searches
    searches = [e for e in events if isinstance(e, SearchEvent)]
    clicks = [e for e in events if isinstance(e, ClickEvent)]
    # a click repeated a minute later (a double click, a back button): it counts once, as the pipeline counts it
    clicks = sorted(clicks + [ClickEvent(c.search_id, c.user, c.url, c.ts_ms + 60_000) for c in clicks[::4]],
                    key=lambda c: c.ts_ms)
    # a search and its click three hours on: both watermarks pass every real hour, so each is written
    end = max(e.ts_ms for e in events) + 3 * 3_600_000
    searches.append(SearchEvent("end", "u0", "the end", end))
    clicks.append(ClickEvent("end", "u0", "/end", end + 1000))
    produce(broker.bootstrap, topic_name + "-s", [e.value() for e in searches])
    produce(broker.bootstrap, topic_name + "-c", [e.value() for e in clicks])

    pipeline = joins.click_through(
        joins.parse_json(_frames(spark, [e.value() for e in searches]), joins.SEARCH_SCHEMA, "search_time"),
        joins.parse_json(_frames(spark, [e.value() for e in clicks]), joins.CLICK_SCHEMA, "click_time"))
    expected = {(r.window_start, r.query): (r.searches, r.clicks, r.ctr) for r in pipeline.collect()
                if r.query != "the end"}
    assert len(expected) > 30 and any(c for _, c, _ in expected.values())
    at = {e.search_id: e.ts_ms for e in searches}
    in_the_hour = sum(1 for c in clicks if c.search_id != "end" and 0 <= c.ts_ms - at[c.search_id] <= 3_600_000)
    assert in_the_hour > sum(c for _, c, _ in expected.values())  # repeated clicks a plain join would count

    n = abs(hash(topic_name)) % 10**8
    *_, rows = list(sql.execute(f"""
        CREATE STREAM searches_{n} (search_id STRING, user STRING, query STRING, ts BIGINT)
            WITH (topic='{topic_name}-s', format='json', timestamp='ts', watermark='10 minutes');
        CREATE STREAM clicks_{n} (search_id STRING, user STRING, url STRING, ts BIGINT)
            WITH (topic='{topic_name}-c', format='json', timestamp='ts', watermark='10 minutes');
        SELECT window.start AS window_start, query, count_if(NOT clicked) AS searches, count_if(clicked) AS clicks,
               count_if(clicked) / count_if(NOT clicked) AS ctr
        FROM (SELECT query, ts, false AS clicked FROM searches_{n}
              UNION ALL
              SELECT s.query, s.ts, true FROM searches_{n} s LEFT SEMI JOIN clicks_{n} c
                  ON s.search_id = c.search_id AND c.ts BETWEEN s.ts AND s.ts + INTERVAL 1 HOUR)
        GROUP BY window(ts, '1 hour'), query
        EMIT FINAL LIMIT {len(expected)}"""))
    got = [tuple(r) for r in rows.rows]
    assert len(got) == len(expected)  # each hour once
    assert {(start, query): tuple(rest) for start, query, *rest in got} == {k: tuple(v) for k, v in expected.items()}


def _timelines_of(changes) -> dict[str, set]:
    """The pipeline's changelog applied in its order (an author's changes by seq): owner -> {tweet ids}."""
    view: dict[tuple, str] = {}  # (owner, tweet id) -> author
    for c in sorted(changes, key=lambda c: (c.author, c.seq)):
        if c.op == "add":
            view[(c.owner, c.tweet_id)] = c.author
        else:  # unfollow: the author's tweets leave the owner's timeline
            view = {k: a for k, a in view.items() if not (k[0] == c.owner and a == c.author)}
    out: dict[str, set] = {}
    for owner, tweet_id in view:
        out.setdefault(owner, set()).add(tweet_id)
    return out


def test_the_timeline_in_sql_matches_the_pipeline(sql, broker, topic_name, spark, tmp_path, monkeypatch):
    """Spark joins no two streaming aggregations (a table-table join), so the timeline is the aggregation after
    the join: every tweet meets every follow or unfollow of its author (a stream-stream join, written to a
    stream), and a table keeps, per owner and tweet, the author's latest follow event of that owner."""
    from freshet.gen.timeline import Follow, Tweet, timeline_events
    from freshet.pipelines import timeline as tl
    from freshet.sql.table_store import store_for

    events = list(timeline_events(users=20, tweets=300, seed=3, churn=0.2))  # 15 tweets an author: under 50
    tweets = [e for e in events if isinstance(e, Tweet)]
    follows = [e for e in events if isinstance(e, Follow)]
    assert any(f.op == "unfollow" for f in follows)
    produce(broker.bootstrap, topic_name + "-t", [e.value() for e in tweets], [e.key for e in tweets])
    produce(broker.bootstrap, topic_name + "-f", [e.value() for e in follows], [e.key for e in follows])
    expected = _timelines_of(tl.timeline_changes(_frames(spark, [e.value() for e in tweets]),
                                                 _frames(spark, [e.value() for e in follows])).collect())
    # every (owner, tweet) the join meets: a follow event of the owner for the tweet's author
    followed = {(f.follower, f.followee) for f in follows}
    met = {(owner, t.tweet_id) for t in tweets for owner, author in followed if author == t.user}

    monkeypatch.setenv("FRESHET_DATA_DIR", str(tmp_path))
    n = abs(hash(topic_name)) % 10**8
    created = list(sql.execute(f"""
        CREATE STREAM tweets_{n} (tweet_id STRING, user STRING, text STRING, ts BIGINT)
            WITH (topic='{topic_name}-t', format='json', timestamp='ts');
        CREATE STREAM follows_{n} (follower STRING, followee STRING, op STRING, ts BIGINT)
            WITH (topic='{topic_name}-f', format='json', timestamp='ts');
        CREATE STREAM reach_{n} WITH (partitions=2) AS
            SELECT f.follower AS owner, t.tweet_id, t.user AS author, f.op, f.ts AS followed_at
            FROM tweets_{n} t JOIN follows_{n} f ON t.user = f.followee;
        CREATE TABLE timeline_{n} AS
            SELECT owner, tweet_id, max_by(op, followed_at) AS latest_follow_event
            FROM reach_{n} GROUP BY owner, tweet_id"""))
    query_ids = [m.text.split()[4].rstrip(":") for m in created[2:]]
    try:
        store = store_for(sql)
        wait_for(lambda: store.count(f"timeline_{n}") >= len(met), 600, "every (owner, tweet) in the table's copy")
        got: dict[str, set] = {}
        for owner, tweet_id in met:
            row = store.get(f"timeline_{n}", [owner, tweet_id])
            if row[2] == "follow":
                got.setdefault(owner, set()).add(tweet_id)
        assert got == expected
        # a pull query reads one owner's tweet from the copy
        owner, tweet_id = next((o, t) for o, ts in sorted(expected.items()) for t in sorted(ts))
        (pulled,) = sql.execute(f"SELECT latest_follow_event FROM timeline_{n} "
                                f"WHERE owner = '{owner}' AND tweet_id = '{tweet_id}'")
        assert pulled.rows == [("follow",)]
    finally:
        for query_id in reversed(query_ids):
            list(sql.execute(f"TERMINATE {query_id}"))


def test_a_join_of_two_tables_is_refused_in_one_line_naming_why(sql, broker, topic_name, spark):
    import pytest

    from freshet.sql.errors import SqlError

    produce(broker.bootstrap, topic_name + "-a", [{"id": 1, "name": "ada"}], ['{"id": 1}'], partitions=1)
    produce(broker.bootstrap, topic_name + "-b", [{"id": 1, "city": "London"}], ['{"id": 1}'], partitions=1)
    n = abs(hash(topic_name)) % 10**8
    list(sql.execute(f"""
        CREATE TABLE names_{n} (id INT PRIMARY KEY, name STRING) WITH (topic='{topic_name}-a', format='json');
        CREATE TABLE cities_{n} (id INT PRIMARY KEY, city STRING) WITH (topic='{topic_name}-b', format='json')"""))
    for emit in ("EMIT CHANGES", "EMIT FINAL"):
        with pytest.raises(SqlError, match="Spark joins no two streaming aggregations") as caught:
            list(sql.execute(f"SHOW TABLES;\n  SELECT a.id, name, city FROM names_{n} a JOIN cities_{n} b "
                             f"ON a.id = b.id {emit}"))
        assert (caught.value.line, caught.value.column) == (2, 3) and "\n" not in str(caught.value)
        assert "join the streams and aggregate after the join (CREATE STREAM j AS SELECT" in str(caught.value)
    # over Spark Connect the plan is read from the text of the server's analyzed plan: the same answers from it
    from freshet.sql.plans import analyzed_text, plan_text_joins_two_aggregations

    for query, joins_two in ((f"SELECT a.id, name, city FROM names_{n} a JOIN cities_{n} b ON a.id = b.id", True),
                             (f"SELECT a.id, name FROM names_{n} a JOIN (SELECT 1 AS id) b ON a.id = b.id", False),
                             (f"SELECT id, name FROM names_{n}", False)):
        assert plan_text_joins_two_aggregations(analyzed_text(spark.sql(query))) is joins_two, query
    # a persistent query of it too: refused before anything is created, stored or started
    with pytest.raises(SqlError, match="Spark joins no two streaming aggregations.*CREATE TABLE t AS SELECT"):
        list(sql.execute(f"CREATE TABLE both_{n} AS SELECT a.id, max(name) AS name, max(city) AS city "
                         f"FROM names_{n} a JOIN cities_{n} b ON a.id = b.id GROUP BY a.id"))
    assert sql.catalog.get(f"both_{n}") is None and f"both_{n}" not in TopicAdmin(broker.bootstrap).list_topics()
    assert not spark.streams.active
