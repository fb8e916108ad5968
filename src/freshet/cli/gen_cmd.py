"""``freshet gen access-logs``: produce generated events to a topic at a chosen rate."""

from __future__ import annotations

import time

import click
from confluent_kafka import Producer

from freshet.client import ClientError, TopicAdmin, producer_config
from freshet.client.produce import produce_waiting
from freshet.gen.access_logs import AccessLogGenerator

from .common import bootstrap_option, one_line_errors


def recent_start_ms() -> int:
    """Event time for generated data: from the start of the hour a day ago (older records would fall to the
    topic's retention, which goes by the records' timestamps: their event time)."""
    return (int(time.time() * 1000) // 3_600_000 - 24) * 3_600_000


def produce_access_logs(bootstrap: str, topic: str, rate: float, count: int | None, seconds: float | None,
                        out_of_order: float, late: float, seed: int, on_progress=None, time_scale: float = 1.0,
                        stop=None, start_ms: int | None = None) -> int:
    """Produce paced access-log events (key: client IP, timestamp: event time). Returns how many.

    ``time_scale`` > 1 makes event time pass that many times faster than the wall clock (a demo
    sees minute windows close every few seconds). ``stop`` is an optional threading.Event; ``start_ms``: the first
    event's time (default: now).
    """
    if time_scale <= 0:
        raise ClientError("--time-scale must be positive")
    for option, value in (("--count", count), ("--seconds", seconds)):
        if value is not None and value < 0:  # it produced nothing and exited 0
            raise ClientError(f"{option} must be 0 or more, got {value:g}")
    try:
        generator = AccessLogGenerator(seed=seed, rate_per_s=rate / time_scale, out_of_order=out_of_order,
                                       late=late, start_ms=start_ms)
    except ValueError as exc:
        raise ClientError(str(exc)) from None
    producer = Producer(producer_config(bootstrap, {"log_level": 0}))
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(err.str())

    start = time.monotonic()
    sent = 0
    for event in generator.events():
        if count is not None and sent >= count:
            break
        elapsed = time.monotonic() - start
        if (seconds is not None and elapsed >= seconds) or (stop is not None and stop.is_set()):
            break
        ahead = sent / rate - elapsed
        if ahead > 0.005:
            producer.poll(ahead)
        produce_waiting(producer, topic, event.line.encode(), event.client_ip.encode(),
                        timestamp=event.timestamp_ms, on_delivery=on_delivery)
        sent += 1
        if sent % 1000 == 0:
            producer.poll(0)
            if on_progress:
                on_progress(sent)
        if failures:
            raise ClientError(f"delivery failed: {failures[0]}")
    left = producer.flush(30)
    if failures or left:
        raise ClientError(f"{len(failures) + left} of {sent} events were not delivered")
    return sent


@click.group()
def gen() -> None:
    """Generate events into a topic."""


@gen.command("access-logs")
@click.argument("topic")
@click.option("--rate", default=1000.0, show_default=True, help="Events per second.")
@click.option("--count", type=int, default=None, help="Stop after this many events.")
@click.option("--seconds", type=float, default=None, help="Stop after this long.")
@click.option("--out-of-order", default=0.05, show_default=True, help="Fraction up to 30 s behind.")
@click.option("--late", default=0.01, show_default=True, help="Fraction 2-15 minutes behind.")
@click.option("--seed", default=1, show_default=True)
@click.option("--time-scale", default=1.0, show_default=True, help="Event time passes this many times faster.")
@bootstrap_option
@one_line_errors
def access_logs(topic: str, rate: float, count: int | None, seconds: float | None, out_of_order: float,
                late: float, seed: int, time_scale: float, bootstrap: str) -> None:
    """Apache combined-format access logs into TOPIC, keyed by client IP, timestamped by event time."""
    TopicAdmin(bootstrap).partition_count(topic)
    sent = produce_access_logs(bootstrap, topic, rate, count, seconds, out_of_order, late, seed,
                               time_scale=time_scale)
    click.echo(f"produced {sent} access-log events to {topic}", err=True)


@gen.command("search-clicks")
@click.option("--searches-topic", default="searches", show_default=True)
@click.option("--clicks-topic", default="clicks", show_default=True)
@click.option("--count", default=10_000, show_default=True, help="How many searches.")
@click.option("--click-rate", default=0.3, show_default=True)
@click.option("--seed", default=1, show_default=True)
@bootstrap_option
@one_line_errors
def search_clicks_cmd(searches_topic: str, clicks_topic: str, count: int, click_rate: float, seed: int,
                      bootstrap: str) -> None:
    """Searches and the clicks they lead to, into two topics (keyed by user, timestamped by event time)."""
    from freshet.client.produce import produce_records
    from freshet.gen.search_clicks import ClickEvent, SearchEvent, search_clicks

    admin = TopicAdmin(bootstrap)
    admin.partition_count(searches_topic)
    admin.partition_count(clicks_topic)
    events = list(search_clicks(count, seed=seed, click_rate=click_rate))
    searches = [e for e in events if isinstance(e, SearchEvent)]
    clicks = sorted((e for e in events if isinstance(e, ClickEvent)), key=lambda c: c.ts_ms)
    produce_records(bootstrap, searches_topic, ((e.user.encode(), e.value(), e.ts_ms) for e in searches))
    produce_records(bootstrap, clicks_topic, ((e.user.encode(), e.value(), e.ts_ms) for e in clicks))
    click.echo(f"produced {len(searches)} searches to {searches_topic} and {len(clicks)} clicks to {clicks_topic}",
               err=True)


@gen.command("timeline")
@click.option("--tweets-topic", default="tweets", show_default=True)
@click.option("--follows-topic", default="follows", show_default=True)
@click.option("--users", default=50, show_default=True)
@click.option("--tweets", "count", default=2000, show_default=True, help="How many tweets.")
@click.option("--churn", default=0.05, show_default=True, help="Chance of a follow or unfollow after each tweet.")
@click.option("--seed", default=1, show_default=True)
@bootstrap_option
@one_line_errors
def timeline_cmd(tweets_topic: str, follows_topic: str, users: int, count: int, churn: float, seed: int,
                 bootstrap: str) -> None:
    """Tweets (keyed by author) and follows / unfollows (keyed by follower), for `freshet run timeline`."""
    from freshet.client.produce import produce_records
    from freshet.gen.timeline import Tweet, timeline_events

    if users < 2:
        raise ClientError("--users must be at least 2")
    admin = TopicAdmin(bootstrap)
    admin.partition_count(tweets_topic)
    admin.partition_count(follows_topic)
    events = list(timeline_events(users, count, seed=seed, churn=churn))
    tweets = [e for e in events if isinstance(e, Tweet)]
    follows = [e for e in events if not isinstance(e, Tweet)]
    produce_records(bootstrap, tweets_topic, ((e.key, e.value(), e.ts_ms) for e in tweets))
    produce_records(bootstrap, follows_topic, ((e.key, e.value(), e.ts_ms) for e in follows))
    click.echo(f"produced {len(tweets)} tweets to {tweets_topic} and {len(follows)} follows/unfollows to "
               f"{follows_topic}", err=True)


@gen.command("activity")
@click.argument("topic")
@click.option("--users", default=100, show_default=True, help="User ids 1..N (as in the users table).")
@click.option("--count", default=10_000, show_default=True)
@click.option("--seed", default=1, show_default=True)
@bootstrap_option
@one_line_errors
def activity_cmd(topic: str, users: int, count: int, seed: int, bootstrap: str) -> None:
    """Page visits {user_id, url, ts} timestamped now, for `freshet run favourite-urls`."""
    import json
    import random
    import time

    from freshet.client.produce import produce_records

    if users < 1:
        raise ClientError("--users must be at least 1")
    TopicAdmin(bootstrap).partition_count(topic)
    rng = random.Random(seed)
    urls = ["/", "/docs", "/blog", "/pricing", "/about", "/careers", "/search"]
    now = int(time.time() * 1000)
    events = [(rng.randint(1, users), rng.choices(urls, weights=range(len(urls), 0, -1))[0], now + i)
              for i in range(count)]
    produce_records(bootstrap, topic, ((str(u).encode(), json.dumps({"user_id": u, "url": url, "ts": t}).encode(), t)
                                       for u, url, t in events))
    click.echo(f"produced {count} activity events to {topic}", err=True)


@gen.command("security-events")
@click.argument("topic")
@click.option("--count", default=50_000, show_default=True, help="Background events (more if the attacks need the time).")
@click.option("--attacks", default=3, show_default=True, help="Attacks planted of each kind: brute force, HTTP scan, p2p.")
@click.option("--rate", default=50.0, show_default=True, help="Background events per second of event time.")
@click.option("--sources", default=10_000, show_default=True, help="Source IPs.")
@click.option("--seed", default=7, show_default=True)
@click.option("--plan", "plan_path", default=None, type=click.Path(dir_okay=False),
              help="Also write what was planted (JSON lines) here.")
@bootstrap_option
@one_line_errors
def security_events_cmd(topic: str, count: int, attacks: int, rate: float, sources: int, seed: int,
                        plan_path: str | None, bootstrap: str) -> None:
    """IDS-style security events with attacks planted at known times (for `freshet rules add --set intrusion`),
    keyed by source IP, timestamped by event time; prints what was planted."""
    import json

    from freshet.cep.matcher import event_time_ms
    from freshet.client.produce import produce_records
    from freshet.gen.security_events import iso, security_events


    TopicAdmin(bootstrap).partition_count(topic)
    try:
        generated = security_events(count, seed=seed, sources=sources, attacks=attacks, rate_per_s=rate,
                                    start_ms=recent_start_ms())
    except ValueError as exc:
        raise ClientError(str(exc)) from None
    produce_records(bootstrap, topic, ((e["src_ip"].encode(), json.dumps(e).encode(), event_time_ms(e["event_time"]))
                                       for e in generated.events))
    lines = [json.dumps({"rule": p.rule, "host": p.host, "start": iso(p.start_ms), "end": iso(p.end_ms),
                         "events": p.events}) for p in generated.planted]
    if plan_path:
        with open(plan_path, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    for p in generated.planted:
        click.echo(f"planted {p.rule:12} {p.host:16} {iso(p.start_ms)} .. {iso(p.end_ms)} ({p.events} events)")
    click.echo(f"produced {len(generated.events)} security events to {topic}", err=True)


@gen.command("listings")
@click.argument("topic")
@click.option("--count", default=10_000, show_default=True)
@click.option("--seed", default=11, show_default=True)
@bootstrap_option
@one_line_errors
def listings_cmd(topic: str, count: int, seed: int, bootstrap: str) -> None:
    """Houses for sale (city, price, bedrooms, title, features), keyed by listing id, for `freshet watch`."""
    import json

    from freshet.cep.matcher import event_time_ms
    from freshet.client.produce import produce_records
    from freshet.gen.listings import listings


    TopicAdmin(bootstrap).partition_count(topic)
    if count < 0:
        raise ClientError("--count must not be negative")
    sent = produce_records(bootstrap, topic, ((e["listing_id"].encode(), json.dumps(e).encode(),
                                               event_time_ms(e["event_time"]))
                                              for e in listings(count, seed=seed, start_ms=recent_start_ms())))
    click.echo(f"produced {sent} listings to {topic}", err=True)
