"""Table-table join, maintained incrementally: each user's home timeline from tweets and follows.

The seed's Twitter example. Keyed by author (``transformWithStateInPandas``, RocksDB state store,
checkpointed), Spark keeps who follows the author and the author's most recent tweets. Then:

- a tweet goes to every current follower's timeline;
- a follow adds the followee's recent tweets to the new follower's timeline;
- an unfollow removes all of the followee's tweets from the former follower's timeline.

The output is a changelog of the timeline view (``add`` one tweet to one timeline, or
``unfollow``: remove one author from one timeline), applied in order to a PostgreSQL table by
``TimelineSink`` in one transaction per microbatch that also records the batch id: a batch Spark
replays after a crash changes nothing. ``freshet timeline USER`` reads the view.
"""

from __future__ import annotations

from typing import Iterator

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

TWEET_SCHEMA = "tweet_id string, user string, text string, ts long"
FOLLOW_SCHEMA = "follower string, followee string, op string, ts long"
CHANGE_SCHEMA = "op string, owner string, author string, tweet_id string, text string, ts long, seq long"
RECENT_TWEETS = 50  # what a new follower gets of the followee's past


def _json(raw: DataFrame, schema: str) -> DataFrame:
    return raw.select(F.from_json(F.col("value").cast("string"), schema).alias("e")).select("e.*")


def changes(tweets_raw: DataFrame, follows_raw: DataFrame) -> DataFrame:
    """One stream keyed by author: tweets, and follows / unfollows of that author."""
    t = _json(tweets_raw, TWEET_SCHEMA).where("tweet_id IS NOT NULL AND user IS NOT NULL AND ts IS NOT NULL")
    f = _json(follows_raw, FOLLOW_SCHEMA).where(
        "follower IS NOT NULL AND followee IS NOT NULL AND op IN ('follow', 'unfollow') AND ts IS NOT NULL")
    tweets = t.select(F.col("user").alias("author"), F.lit("tweet").alias("kind"),
                      F.lit(None).cast("string").alias("follower"), "tweet_id", "text", "ts")
    follows = f.select(F.col("followee").alias("author"), F.col("op").alias("kind"), "follower",
                       F.lit(None).cast("string").alias("tweet_id"), F.lit(None).cast("string").alias("text"), "ts")
    return tweets.unionByName(follows)


class TimelineFanout(StatefulProcessor):
    """Per author: followers and recent tweets; emits timeline changes."""

    def __init__(self, recent: int = RECENT_TWEETS) -> None:
        self.recent_limit = recent

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.followers = handle.getMapState("followers", "follower string", "since long")
        self.recent = handle.getListState("recent", "tweet_id string, text string, ts long")

    def handleInputRows(self, key, rows: Iterator[pd.DataFrame], timerValues) -> Iterator[pd.DataFrame]:
        author = key[0]
        batch = pd.concat(list(rows), ignore_index=True)
        # in event-time order; a follow and a tweet at the same instant: the follow first
        batch["order"] = batch["kind"].map({"follow": 0, "unfollow": 1, "tweet": 2})
        batch = batch.sort_values(["ts", "order"], kind="stable")
        recent = list(self.recent.get()) if self.recent.exists() else []
        out = []
        for kind, follower, tweet_id, text, ts in zip(batch["kind"], batch["follower"], batch["tweet_id"],
                                                      batch["text"], batch["ts"]):
            ts = int(ts)
            if kind == "tweet":
                recent.append((tweet_id, text, ts))
                recent = sorted(recent, key=lambda r: r[2])[-self.recent_limit:]
                for (owner,) in self.followers.keys():
                    out.append(("add", owner, author, tweet_id, text, ts))
            elif kind == "follow":
                if not self.followers.containsKey((follower,)):
                    self.followers.updateValue((follower,), (ts,))
                    out += [("add", follower, author, t_id, t_text, t_ts) for t_id, t_text, t_ts in recent]
            elif self.followers.containsKey((follower,)):  # unfollow
                self.followers.removeKey((follower,))
                out.append(("unfollow", follower, author, None, None, ts))
        if recent:
            self.recent.put(recent)
        if out:
            frame = pd.DataFrame(out, columns=["op", "owner", "author", "tweet_id", "text", "ts"])
            frame["seq"] = range(len(frame))
            yield frame

    def close(self) -> None:
        pass


def timeline_changes(tweets_raw: DataFrame, follows_raw: DataFrame, recent: int = RECENT_TWEETS) -> DataFrame:
    """The changelog of every home timeline (op add | unfollow), streaming or static."""
    return changes(tweets_raw, follows_raw).groupBy("author").transformWithStateInPandas(
        TimelineFanout(recent), CHANGE_SCHEMA, "append", "None")


TABLE_SQL = """
CREATE TABLE IF NOT EXISTS {table} (
    owner text NOT NULL, tweet_id text NOT NULL, author text NOT NULL, text text, tweeted_at timestamptz NOT NULL,
    PRIMARY KEY (owner, tweet_id));
CREATE INDEX IF NOT EXISTS {index} ON {table} (owner, tweeted_at DESC)
"""


class TimelineSink:
    """foreachBatch: applies a batch of timeline changes to PostgreSQL, exactly once."""

    def __init__(self, dsn: str, table: str = "home_timeline", sink_id: str | None = None) -> None:
        self.dsn, self.table, self.sink_id = dsn, table, sink_id or table

    def ensure_table(self) -> None:
        from freshet.client.postgres import connection, quote_ident
        from freshet.spark.postgres import ensure_progress_table

        with connection(self.dsn) as conn, conn.cursor() as cur:
            cur.execute(TABLE_SQL.format(table=quote_ident(self.table), index=quote_ident(self.table + "_by_time")))
            ensure_progress_table(cur)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        from freshet.client.postgres import connection, quote_ident
        from freshet.spark.postgres import claim_batch

        # one author's changes are in order by seq; different authors never touch the same row
        rows = df.orderBy("author", "seq").collect()
        table = quote_ident(self.table)
        with connection(self.dsn) as conn, conn.cursor() as cur:
            if not claim_batch(cur, self.sink_id, batch_id):
                return
            adds = []
            for r in rows:
                if r.op == "add":
                    adds.append((r.owner, r.tweet_id, r.author, r.text, pd.Timestamp(r.ts, unit="ms", tz="UTC")))
                    continue
                self._insert(cur, table, adds)
                adds = []
                cur.execute(f"DELETE FROM {table} WHERE owner = %s AND author = %s", (r.owner, r.author))
            self._insert(cur, table, adds)

    @staticmethod
    def _insert(cur, table: str, adds: list) -> None:
        if adds:
            from psycopg2.extras import execute_batch

            execute_batch(cur, f"INSERT INTO {table} (owner, tweet_id, author, text, tweeted_at) "
                               "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (owner, tweet_id) DO NOTHING", adds,
                          page_size=500)


def read_timeline(dsn: str, user: str, table: str = "home_timeline", limit: int = 20) -> list[tuple]:
    """A user's home timeline, newest first: (tweeted_at, author, text, tweet_id)."""
    from freshet.client.postgres import connection, quote_ident

    with connection(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT tweeted_at, author, text, tweet_id FROM {quote_ident(table)} WHERE owner = %s "
                    "ORDER BY tweeted_at DESC, tweet_id DESC LIMIT %s", (user, limit))
        return cur.fetchall()


def writer(tweets_raw: DataFrame, follows_raw: DataFrame, dsn: str, table: str = "home_timeline",
           sink_id: str = "timeline"):
    """Stream: the timeline changelog applied to ``table`` in PostgreSQL, exactly once."""
    sink = TimelineSink(dsn, table, sink_id)
    sink.ensure_table()
    return timeline_changes(tweets_raw, follows_raw).writeStream.outputMode("append").foreachBatch(sink)
