"""Stream-table join: activity enriched with the profile valid at the event (profiles from a CDC changelog)."""

from collections import Counter

import pytest

from freshet.pipelines import enrichment as en

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in ms
MIN = 60_000


def changes_df(spark, rows):
    """rows: (user_id, age, op, commit_ms) as Debezium envelopes in a value column, like the CDC topic."""
    return spark.createDataFrame([(en.profile_envelope(u, a, op, t),) for u, a, op, t in rows], "value binary")


def activity_df(spark, rows):
    import json

    return spark.createDataFrame([(json.dumps({"user_id": u, "url": url, "ts": t}).encode(),) for u, url, t in rows],
                                 "value binary")


def test_profile_as_of_the_event_static(spark):
    profiles = en.profile_changes(changes_df(spark, [
        (1, 17, "r", 0),                 # snapshot: valid from ever
        (1, 30, "u", T0 + 10 * MIN),     # birthday... of a kind
        (2, 40, "c", T0 + 5 * MIN),      # created at +5
        (3, 70, "r", 0), (3, None, "d", T0 + 20 * MIN),  # deleted at +20
    ]))
    events = en.activity(activity_df(spark, [
        (1, "/a", T0), (1, "/b", T0 + 10 * MIN - 1), (1, "/c", T0 + 10 * MIN), (1, "/d", T0 + 60 * MIN),
        (2, "/a", T0), (2, "/b", T0 + 6 * MIN),
        (3, "/x", T0 + 19 * MIN), (3, "/y", T0 + 21 * MIN),
        (4, "/z", T0),                   # no profile at all
    ]))
    got = sorted((r.user_id, r.url, r.age_group) for r in en.enrich(events, profiles).collect())
    assert got == [(1, "/a", "under 18"), (1, "/b", "under 18"), (1, "/c", "25-34"), (1, "/d", "25-34"),
                   (2, "/a", "unknown"), (2, "/b", "35-49"),
                   (3, "/x", "65+"), (3, "/y", "unknown"), (4, "/z", "unknown")]
    fav = {r.age_group: (r.url, r.visits) for r in en.favourite_urls(en.enrich(events, profiles)).collect()}
    assert fav["under 18"] == ("/a", 1) and fav["unknown"] == ("/a", 1) and fav["25-34"] == ("/c", 1)


def _as_of(versions, t):
    """Independently: the age in the newest version committed at or before t (None: none or deleted)."""
    age = None
    for valid_from, v_age in sorted(versions):
        if valid_from <= t:
            age = v_age
    return age


# two pipeline runs on the local session, one client process on the cluster: a minute on 2 quiet cores, more on a
# busy machine
@pytest.mark.timeout(900)
def test_streaming_enrichment_from_the_cdc_users_topic(engine, broker, postgres, db, tmp_path):
    """users in PostgreSQL -> freshet cdc -> topic; activity -> topic; Spark keeps the table in state and
    joins each event with the profile of its time; counts land in PostgreSQL; a view names favourites. On the
    local session and on the cluster."""
    import json
    import time

    from freshet.cdc.postgres import CdcConfig
    from freshet.client import TopicAdmin
    from freshet.client.produce import produce_records
    from freshet.pipelines.runner import PipelineSpec
    from freshet.testing.cdc import rebuild, run_connector, unique

    conn, schema = db
    prefix = unique("e")
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE {schema}.users (id int PRIMARY KEY, name text, age int)")
    cur.execute(f"INSERT INTO {schema}.users SELECT g, 'u' || g, 15 + (g * 7) % 60 FROM generate_series(1, 40) g")
    users_topic, activity_topic = f"{prefix}.{schema}.users", f"activity-{prefix}"
    TopicAdmin(broker.bootstrap).create_topic(activity_topic, 2)
    urls = ["/home", "/docs", "/blog", "/pricing", "/about"]
    events = []

    def act(n, seed):
        now = int(time.time() * 1000)
        batch = [(1 + (i * 13 + seed) % 42, urls[(i * 7 + seed * 3 + i // 5) % 5], now + i) for i in range(n)]
        events.extend(batch)  # users 41, 42 never had a profile
        produce_records(broker.bootstrap, activity_topic, ((str(u).encode(), json.dumps(
            {"user_id": u, "url": url, "ts": t}).encode(), t) for u, url, t in batch))

    def changes():
        act(300, 1)
        time.sleep(0.05)
        cur.execute(f"UPDATE {schema}.users SET age = 70 WHERE id <= 10")   # ten users move to 65+
        cur.execute(f"DELETE FROM {schema}.users WHERE id BETWEEN 11 AND 13")
        time.sleep(0.05)
        act(300, 2)

    run_connector(CdcConfig(postgres.dsn, [f"{schema}.users"], prefix, broker.bootstrap, slot=unique("s"),
                            publication=unique("p")), changes, changes=13)
    # the users changelog as the topic holds it: each version with its commit time (snapshot: ever)
    versions: dict[int, list] = {}
    for e in rebuild(broker.bootstrap, users_topic)[1]:
        row = e["after"] or e["before"]
        since = en.EVER if e["op"] == "r" else e["source"]["ts_ms"]
        versions.setdefault(row["id"], []).append((since, None if e["op"] == "d" else e["after"]["age"]))
    assert sum(map(len, versions.values())) == 40 + 13
    # a last event an hour on moves the watermark past everything above
    flush_at = events[-1][2] + 3_600_000
    produce_records(broker.bootstrap, activity_topic, [(b"0", json.dumps({"user_id": 0, "url": "/", "ts": flush_at})
                                                        .encode(), flush_at)])

    def spec(table, checkpoint):
        return PipelineSpec("favourite-urls", f"{activity_topic},{users_topic}", f"postgres:{table}", broker.bootstrap,
                            str(tmp_path / checkpoint), lateness="1 minute", available_now=True, pg_dsn=postgres.dsn,
                            query_name=table)

    def read(table):
        from freshet.testing.postgres import rows

        visits = {(g, u): v for g, u, v in rows(postgres.dsn, f"SELECT age_group, url, visits FROM {table}")}
        favourites = dict(rows(postgres.dsn, f"SELECT age_group, url FROM {table}_favourite"))
        return visits, favourites

    # the run and a replay from offset 0 (new checkpoint, new table) in one go: the join depends on event time
    # only, so they give the same answer (on the local session, as the late event below: the pipeline's code is
    # the same on the cluster, whose one run is checked against the same independent count, and a query there
    # costs a minute on a busy machine)
    table, replay = f"visits_{prefix}", f"replay_{prefix}"
    engine.run_all([spec(table, "ck")] + ([spec(replay, "ck-replay")] if engine.name == "local" else []))
    got, favourites = read(table)
    expected = Counter((en.age_group(_as_of(versions.get(u, []), t)), url) for u, url, t in events)
    assert got == dict(expected)
    assert got[("65+", "/home")] > 0 and sum(v for (g, _), v in got.items() if g == "unknown") > 0
    for group in {g for g, _ in expected}:
        best = max(v for (g, _), v in expected.items() if g == group)
        assert expected[(group, favourites[group])] == best
    if engine.name == "local":
        assert read(replay) == (got, favourites)

    if engine.name != "local":  # the watermark's handling is Spark's own, the same on any master: checked once
        return
    # late: an event older than the watermark is dropped and counted, and changes nothing
    old = events[0][2]
    produce_records(broker.bootstrap, activity_topic, [(b"1", json.dumps({"user_id": 1, "url": "/late", "ts": old})
                                                        .encode(), old)])
    query = engine.run(spec(table, "ck"))
    assert read(table)[0] == got
    assert sum(op["numRowsDroppedByWatermark"] for p in query.recentProgress for op in p["stateOperators"]) == 1
