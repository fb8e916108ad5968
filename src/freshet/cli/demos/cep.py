"""``freshet demo intrusion`` and ``freshet demo alerts``: complex event processing and search on streams,
step by step, each step checked (exit 1 if one does not hold).

intrusion: security events with attacks planted at known times go into the log; the lecture's three
intrusion-detection rules are stored; the ``cep`` pipeline matches them on Spark into a topic of alerts;
the alerts are the planted attacks, one each, and nothing else.

alerts: people store searches for houses ("Delft under 400,000", "canal view, not leasehold"); listings
go into the log; the ``watch`` pipeline matches every listing against every stored search on Spark; the
alerts are what a scan of every listing against every search finds.
"""

from __future__ import annotations

import json
import os
import time

import click
from rich.console import Console
from rich.table import Table

from freshet.client import TopicAdmin
from freshet.client.produce import produce_records
from freshet.client.stored import RULES_TOPIC, WATCHES_TOPIC, StoredDefinitions

from ..common import stderr_to
from ..gen_cmd import recent_start_ms
from .preamble import Demo, data_dir_option, json_values


def _host(alert: dict):
    """The host an intrusion alert is about: its key's one field (dst_ip or src_ip)."""
    return next(iter(alert["key"].values()))


def _run_available_now(pipeline: str, topic: str, sink_topic: str, bootstrap: str, data_dir: str,
                       lateness: str, console: Console) -> float:
    from freshet.pipelines.runner import PipelineSpec, start
    from freshet.spark import session

    console.print(f"    Spark: `freshet run {pipeline} --from {topic} --to topic:{sink_topic} --available-now` "
                  f"(log in {data_dir}/spark.log) ...")
    began = time.monotonic()
    with stderr_to(os.path.join(data_dir, "spark.log")):
        spark = session(f"freshet-demo-{pipeline}", shuffle_partitions=2)
        try:
            spec = PipelineSpec(pipeline, topic, f"topic:{sink_topic}", bootstrap,
                                os.path.join(data_dir, f"checkpoint-{pipeline}"), lateness=lateness,
                                available_now=True)
            query = start(spark, spec)
            query.awaitTermination()
            if query.exception() is not None:
                raise click.ClickException(f"the {pipeline} pipeline failed: {query.exception()}")
        finally:
            spark.stop()
    return time.monotonic() - began


@click.command("intrusion")
@data_dir_option("intrusion")
@click.option("--events", default=20_000, show_default=True, type=click.IntRange(min=0), help="Background security events.")
@click.option("--attacks", default=3, show_default=True, type=click.IntRange(min=1), help="Attacks planted of each kind.")
def intrusion_demo(data_dir: str, events: int, attacks: int) -> None:
    """The lecture's intrusion-detection rules on Spark: the alerts are the planted attacks."""
    from freshet.cep.matcher import event_time_ms
    from freshet.cep.rulesets import ruleset
    from freshet.gen.security_events import iso, security_events

    with Demo(data_dir) as demo:
        console, data_dir, bootstrap = demo.console, demo.data_dir, demo.bootstrap
        admin = TopicAdmin(bootstrap)
        admin.create_topic("security-events", 3)
        admin.create_topic("alerts", 1)
        generated = security_events(events, attacks=attacks, rate_per_s=20, seed=7, start_ms=recent_start_ms())
        produce_records(bootstrap, "security-events", (
            (e["src_ip"].encode(), json.dumps(e).encode(), event_time_ms(e["event_time"])) for e in generated.events))
        span = (event_time_ms(generated.events[-1]["event_time"]) - event_time_ms(generated.events[0]["event_time"]))
        console.print(f"[bold]1. security events[/]: {len(generated.events)} into topic security-events "
                      f"({span / 60_000:.0f} minutes of event time, {len({e['src_ip'] for e in generated.events})} "
                      "source IPs, a few out of order), with these attacks planted:")
        planted = Table("kind", "host", "from (UTC)", "to", "events")
        for p in generated.planted:
            planted.add_row(p.rule, p.host, iso(p.start_ms)[11:19], iso(p.end_ms)[11:19], str(p.events))
        console.print(planted)

        console.print("[bold]2. the rules[/] (`freshet rules add --set intrusion`), the lecture's, verbatim:")
        stored = StoredDefinitions(bootstrap, RULES_TOPIC)
        for rule in ruleset("intrusion"):
            stored.put(rule.name, rule.text)
            where = rule.text.split("WHERE", 1)[1].split("\n", 1)[0].strip()
            console.print(f"    {rule.name:12} WHERE {where}\n{'':17}PARTITION BY {'.'.join(rule.partition_by[0])} "
                          f"PATTERN ({rule.describe()})")
        demo.check(sorted(stored.refresh()) == ["brute_force", "http_scan", "p2p"],
                    f"three rules in {RULES_TOPIC} (a compacted topic: a running query picks up changes)")

        console.print("[bold]3. matching on Spark[/]: per rule and partition key, in event-time order once the "
                      "watermark (30 s behind) passes, each match once")
        seconds = _run_available_now("cep", "security-events", "alerts", bootstrap, data_dir, "30 seconds", console)
        alerts = json_values(bootstrap, "alerts")
        table = Table("rule", "key", "from (UTC)", "to", "what")
        for a in sorted(alerts, key=lambda a: a["match_start"]):
            m = a["measures"]
            what = {"brute_force": lambda: f"{m['attempts']} attempts, {m['sources']} sources",
                    "http_scan": lambda: f"{m['names']}th distinct probe",
                    "p2p": lambda: m["event_name"]}[a["rule"]]()
            table.add_row(a["rule"], _host(a), a["match_start"][11:19], a["match_end"][11:19], what)
        console.print(table)
        console.print(f"    ({seconds:.0f} s, Spark's start-up included)")

        console.print("[bold]4. the alerts against the plan[/]:")
        got = sorted((a["rule"], _host(a)) for a in alerts)
        expected = sorted((p.rule, p.host) for p in generated.planted)
        demo.check(got == expected, f"{len(alerts)} alerts: every planted attack once, nothing else "
                                     f"({len(expected)} planted)")
        by_host = {(p.rule, p.host): p for p in generated.planted}
        brute = [a for a in alerts if a["rule"] == "brute_force"]
        demo.check(all(a["measures"]["attempts"] == by_host[("brute_force", _host(a))].events
                        for a in brute if ("brute_force", _host(a)) in by_host),
                    "each brute-force alert counts every attempt of its attack (the pattern A{20,} is greedy)")
        demo.finish()


SEARCHES = {
    "anna": "city = Delft AND price < 400000",
    "ben": '"canal view" AND NOT leasehold',
    "cas": "bedrooms >= 5 AND city IN (Utrecht, Leiden)",
    "dee": "houseboat AND (garden OR \"roof terrace\")",
    "eva": "title:renovated AND area_m2 > 150 AND price <= 600000",
}


@click.command("alerts")
@data_dir_option("alerts")
@click.option("--listings", "count", default=3000, show_default=True, type=click.IntRange(min=1), help="Listings to publish.")
def alerts_demo(data_dir: str, count: int) -> None:
    """Stored searches matched against every new listing on Spark: alerts as a full scan finds them."""
    from freshet.cep.matcher import event_time_ms
    from freshet.cep.search import Document, QueryIndex, matches, parse_query
    from freshet.gen.listings import listings

    with Demo(data_dir) as demo:
        console, data_dir, bootstrap = demo.console, demo.data_dir, demo.bootstrap
        admin = TopicAdmin(bootstrap)
        admin.create_topic("listings", 2)
        admin.create_topic("listing-alerts", 1)
        console.print("[bold]1. stored searches[/] (`freshet watch add QUERY --id NAME`):")
        stored = StoredDefinitions(bootstrap, WATCHES_TOPIC)
        for who, query in SEARCHES.items():
            stored.put(who, query)
            console.print(f"    {who:5} {query}")
        index = QueryIndex()
        console.print("    indexed by the terms an event must contain to be checked against each:")
        for who, query in SEARCHES.items():
            anchor = index.add(who, query).anchor
            needs = {"pair": lambda: " and ".join(anchor[1:]), "any": lambda: " or ".join(sorted(anchor[1])),
                     "none": lambda: "(checked against every event)"}[anchor[0]]()
            console.print(f"    {who:5} {needs}")

        published = list(listings(count, seed=11, start_ms=recent_start_ms()))
        produce_records(bootstrap, "listings", ((e["listing_id"].encode(), json.dumps(e).encode(),
                                                 event_time_ms(e["event_time"])) for e in published))
        console.print(f"[bold]2. listings[/]: {len(published)} into topic listings, e.g. "
                      f"{published[0]['title']!r} ({published[0]['city']}, {published[0]['price']})")

        console.print("[bold]3. matching on Spark[/]: every listing against every stored search; one record per "
                      "listing that matches, naming the searches")
        seconds = _run_available_now("watch", "listings", "listing-alerts", bootstrap, data_dir, "1 minute", console)
        alerts = json_values(bootstrap, "listing-alerts")
        table = Table("search", "alerts", "first alert")
        for who in SEARCHES:
            mine = sorted((a for a in alerts if who in a["query_ids"]), key=lambda a: a["offset"])
            first = json.loads(mine[0]["event"]) if mine else None
            table.add_row(who, str(len(mine)), "" if first is None else
                          f"{first['listing_id']}: {first['title'][:60]} ({first['city']}, {first['price']})")
        console.print(table)
        console.print(f"    ({seconds:.0f} s, Spark's start-up included)")

        console.print("[bold]4. the alerts against a full scan[/] (every listing against every search):")
        scan = sorted((who, e["listing_id"]) for e in published for who, q in SEARCHES.items()
                      if matches(parse_query(q), Document(e)))
        got = sorted((who, json.loads(a["event"])["listing_id"]) for a in alerts for who in a["query_ids"])
        demo.check(got == scan, f"{len(got)} alerts in {len(alerts)} records (one per listing, naming its "
                                 f"searches), the same as the scan's {len(scan)}")
        demo.check(all(any(who in a["query_ids"] for a in alerts) for who in SEARCHES),
                    "every search found at least one house")
        for e in published:
            index.match(e)
        evaluated = index.evaluated
        demo.check(evaluated < len(published) * len(SEARCHES) / 2,
                    f"the presearch evaluated {evaluated} (listing, search) pairs in full, "
                    f"not all {len(published) * len(SEARCHES)}")
        demo.finish()
