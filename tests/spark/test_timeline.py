"""Table-table join: home timelines maintained from tweets and follows, served from PostgreSQL."""

import os
import subprocess

import pytest

from freshet.gen.timeline import Follow, Tweet, timeline_events
from freshet.pipelines import timeline as tl
from freshet.testing.cli import freshet_argv


def frames(spark, events):
    tweets = [(e.value(),) for e in events if isinstance(e, Tweet)]
    follows = [(e.value(),) for e in events if isinstance(e, Follow)]
    return spark.createDataFrame(tweets, "value binary"), spark.createDataFrame(follows, "value binary")


def apply(changes) -> dict[str, set]:
    """Apply a timeline changelog in order: owner -> {tweet ids}."""
    timelines: dict[str, dict] = {}
    for c in sorted(changes, key=lambda c: (c.author, c.seq)):
        view = timelines.setdefault(c.owner, {})
        if c.op == "add":
            view[c.tweet_id] = c.author
        else:
            for tweet_id in [t for t, a in view.items() if a == c.author]:
                del view[tweet_id]
    return {owner: set(view) for owner, view in timelines.items() if view}


def test_follow_tweet_unfollow_static(spark):
    events = [Tweet("t1", "bob", "before anyone followed", 1), Follow("ann", "bob", "follow", 2),
              Tweet("t2", "bob", "hello ann", 3), Tweet("t3", "cat", "nobody follows cat", 4),
              Follow("ann", "cat", "follow", 5), Follow("dan", "bob", "follow", 6),
              Follow("ann", "bob", "unfollow", 7), Tweet("t4", "bob", "ann left", 8),
              Follow("ann", "bob", "unfollow", 9)]  # unfollowing twice changes nothing
    got = apply(tl.timeline_changes(*frames(spark, events)).collect())
    # ann: bob's tweets arrived (t1 by the follow, t2 live) and left with the unfollow; cat's t3 by the follow
    assert got == {"ann": {"t3"}, "dan": {"t1", "t2", "t4"}}


def test_a_new_follow_brings_only_the_recent_tweets(spark):
    events = [Tweet(f"t{i}", "bob", "x", i) for i in range(5)] + [Follow("ann", "bob", "follow", 10)]
    got = apply(tl.timeline_changes(*frames(spark, events), recent=2).collect())
    assert got == {"ann": {"t3", "t4"}}


def expected_timelines(events) -> dict[str, set]:
    """Independently: after all events, each user's timeline is every tweet of whom they follow
    (the generator's authors tweet fewer than RECENT_TWEETS times, so follows bring everything)."""
    following: dict[str, set] = {}
    for e in events:
        if isinstance(e, Follow):
            (following.setdefault(e.follower, set()).add if e.op == "follow"
             else following.setdefault(e.follower, set()).discard)(e.followee)
    by_author: dict[str, set] = {}
    for e in events:
        if isinstance(e, Tweet):
            by_author.setdefault(e.user, set()).add(e.tweet_id)
    out = {u: set().union(*(by_author.get(v, set()) for v in vs)) for u, vs in following.items()}
    return {u: t for u, t in out.items() if t}


# a Spark driver started twice (once killed mid-stream): 20-60 s each on 2 quiet cores, minutes on a busy machine
@pytest.mark.timeout(1500)
def test_timeline_view_in_postgres_survives_kill_9_and_serves_freshet_timeline(broker, postgres, tmp_path):
    """tweets + follows -> freshet run timeline -> PostgreSQL, the driver killed -9 mid-stream:
    the state (followers, recent tweets) is recovered and every timeline equals the one computed in Python from
    the events."""
    from freshet.client import TopicAdmin
    from freshet.client.produce import produce_records
    from freshet.pipelines.runner import PipelineSpec
    from freshet.testing.crash import kill_mid_stream
    from freshet.testing.spark_engines import run_process

    tweets_topic, follows_topic, table = f"tweets-{os.getpid()}", f"follows-{os.getpid()}", f"tl_{os.getpid()}"
    admin = TopicAdmin(broker.bootstrap)
    admin.create_topic(tweets_topic, 2)
    admin.create_topic(follows_topic, 2)
    events = list(timeline_events(users=50, tweets=1200, seed=7, churn=0.2))
    per_author = {}
    for e in events:
        if isinstance(e, Tweet):
            per_author[e.user] = per_author.get(e.user, 0) + 1
    assert max(per_author.values()) < tl.RECENT_TWEETS  # so a follow brings all of the followee's tweets
    assert sum(1 for e in events if isinstance(e, Follow) and e.op == "unfollow") > 20
    produce_records(broker.bootstrap, tweets_topic, ((e.key, e.value(), e.ts_ms) for e in events
                                                     if isinstance(e, Tweet)))
    produce_records(broker.bootstrap, follows_topic, ((e.key, e.value(), e.ts_ms) for e in events
                                                      if isinstance(e, Follow)))
    checkpoint = str(tmp_path / "ck")
    run = freshet_argv("run", "timeline", "--from", f"{tweets_topic},{follows_topic}", "--to", f"postgres:{table}",
                  "--pg-dsn", postgres.dsn, "--checkpoint", checkpoint, "--bootstrap", broker.bootstrap)
    # small microbatches until the kill; the restart takes the rest in one (each microbatch of a stateful
    # query costs seconds on 2 shared cores). Two shuffle partitions, as the tests' shared session has: half the
    # state stores each batch loads and commits of freshet run's four (the restart takes the checkpoint's number)
    cmd = run + ["--trigger-seconds", "0.5", "--max-offsets-per-trigger", "300",
                 "--spark-conf", "spark.sql.shuffle.partitions=2"]
    assert kill_mid_stream(cmd, checkpoint, targets=(2,)) == 1
    # the killed query run to the end on its checkpoint (no replay of the events from offset 0 in Spark beside it:
    # the timelines computed in Python are the independent answer)
    spec = PipelineSpec("timeline", f"{tweets_topic},{follows_topic}", f"postgres:{table}", broker.bootstrap,
                        checkpoint, available_now=True, pg_dsn=postgres.dsn)
    final = subprocess.run(run_process("local[2]", [spec]), capture_output=True, text=True, timeout=720)
    assert final.returncode == 0, final.stderr[-3000:]

    def timelines(table):
        from freshet.testing.postgres import rows as pg_rows

        rows = pg_rows(postgres.dsn, f"SELECT owner, tweet_id FROM {table}")
        out: dict[str, set] = {}
        for owner, tweet_id in rows:
            out.setdefault(owner, set()).add(tweet_id)
        return out

    got = timelines(table)
    assert got == expected_timelines(events)

    user = max(got, key=lambda u: len(got[u]))
    shown = subprocess.run(freshet_argv("timeline", user, "--pg-dsn", postgres.dsn, "--table", table, "--limit", "5"),
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    newest = sorted((e for e in events if isinstance(e, Tweet) and e.tweet_id in got[user]),
                    key=lambda e: (e.ts_ms, int(e.tweet_id[1:])), reverse=True)[:5]
    assert [line.split("@", 1)[1] for line in shown.stdout.splitlines()] == [f"{e.user}: {e.text}" for e in newest]
    missing = subprocess.run(freshet_argv("timeline", user, "--pg-dsn", postgres.dsn, "--table", "no_such_table"),
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1 and "no table" in missing.stderr
