"""CEP and stored-query throughput on Spark (issue 23), with the pure-Python matchers as baselines.

Starts a broker (127.0.0.1) and one local Spark session (local[2]). Produces:

- ``--events`` security events from 10,000 source IPs (``freshet gen security-events``: background plus
  planted attacks), and stores the lecture's three intrusion rules;
- ``--listings`` house listings, and ``--queries`` stored searches as people save them on a housing site
  (a city with a kind or a feature or a street, a price band, a minimum of bedrooms),

then for ``--rounds`` rounds, alternating: the ``cep`` pipeline over the events, the ``watch`` pipeline over
the listings (each ``--available-now`` into a topic through the exactly-once sink, on a fresh checkpoint),
and, in this process, the pure-Python matcher (``match_events``) and query index (``QueryIndex.match``)
over the same data. events/s through Spark = input rows / the microbatches' time (200,000 offsets per
microbatch; each run's first batch included), and steady = the same without each run's first batch (which
also starts Python workers and state stores). The alerts are checked against the planted attacks every round.

Prints one JSON object per measurement, then the medians and spreads. Targets: >= 100,000 events/s for the
rules, >= 10,000 events/s against 10,000 stored queries.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import tempfile
import time

from freshet.cep.matcher import CompiledRule, event_time_ms, match_events
from freshet.cep.rulesets import ruleset
from freshet.cep.search import QueryIndex
from freshet.client.produce import produce_records
from freshet.client.stored import RULES_TOPIC, WATCHES_TOPIC, StoredDefinitions
from freshet.gen.listings import CITIES, FEATURES, KINDS, STREETS, listings
from freshet.gen.security_events import security_events
from freshet.local import BrokerProcess
from freshet.testing.topics import create_topic, read_to_end


def saved_searches(n: int, seed: int = 5) -> list[str]:
    """What people save on a housing site: a city, a kind or a feature, a price band, a minimum of bedrooms."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        city, roll = rng.choice(CITIES), rng.random()
        low = rng.randint(15, 100) * 10_000
        band = f"price >= {low} AND price <= {low + rng.choice([50_000, 100_000, 150_000])}"
        if roll < 0.5:
            out.append(f"city = '{city}' AND kind = '{rng.choice(KINDS)}' AND {band} "
                       f"AND bedrooms >= {rng.randint(1, 4)}")
        elif roll < 0.75:
            out.append(f"city = '{city}' AND \"{rng.choice(FEATURES)}\" AND {band}")
        elif roll < 0.9:
            out.append(f"street:\"{rng.choice(STREETS)}\" AND city = '{city}' AND {band}")
        else:
            a, b = rng.sample(FEATURES, 2)
            out.append(f'"{a}" AND "{b}" AND city = \'{city}\' AND {band}')
    return out


def run_pipeline(spark, pipeline: str, topic: str, bootstrap: str, workdir: str, round_no: int) -> dict:
    from freshet.pipelines.runner import PipelineSpec, start

    sink = f"{pipeline}-out-{round_no}"
    create_topic(bootstrap, sink, 1)
    spec = PipelineSpec(pipeline, topic, f"topic:{sink}", bootstrap, os.path.join(workdir, f"ck-{pipeline}-{round_no}"),
                        lateness="30 seconds", available_now=True, max_offsets_per_trigger=200_000)
    began = time.monotonic()
    query = start(spark, spec)
    query.awaitTermination()
    wall = time.monotonic() - began
    if query.exception() is not None:
        raise SystemExit(f"{pipeline} failed: {query.exception()}")
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in batches)
    seconds = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    steady = batches[1:] or batches  # a run's first microbatch also starts Python workers and state stores
    steady_rows = sum(p["numInputRows"] for p in steady)
    steady_s = sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000
    out = [json.loads(v) for _, v in read_to_end(bootstrap, sink, 1, "read_committed")]
    return {"rows": rows, "batches": len(batches), "seconds": round(seconds, 2), "wall_s": round(wall, 2),
            "events_per_s": round(rows / seconds), "steady_events_per_s": round(steady_rows / steady_s),
            "output": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--listings", type=int, default=30_000)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from freshet.cli.gen_cmd import recent_start_ms
    from freshet.spark import session

    workdir = tempfile.mkdtemp(prefix="freshet-bench-cep-")
    results: dict[str, list[float]] = {}
    with BrokerProcess(data_dir=os.path.join(workdir, "log"), log_path=os.path.join(workdir, "broker.log")) as broker:
        bootstrap = broker.bootstrap
        generated = security_events(args.events, sources=10_000, attacks=10, rate_per_s=500, seed=17,
                                    start_ms=recent_start_ms())
        create_topic(bootstrap, "security-events", 4)
        produce_records(bootstrap, "security-events", ((e["src_ip"].encode(), json.dumps(e).encode(),
                                                        event_time_ms(e["event_time"])) for e in generated.events))
        rules = StoredDefinitions(bootstrap, RULES_TOPIC)
        for rule in ruleset("intrusion"):
            rules.put(rule.name, rule.text)
        houses = list(listings(args.listings, seed=3, start_ms=recent_start_ms()))
        create_topic(bootstrap, "listings", 4)
        produce_records(bootstrap, "listings", ((e["listing_id"].encode(), json.dumps(e).encode(),
                                                 event_time_ms(e["event_time"])) for e in houses))
        searches = saved_searches(args.queries)
        watches = StoredDefinitions(bootstrap, WATCHES_TOPIC)
        watches.put_many([(f"s{i}", text) for i, text in enumerate(searches)])
        print(json.dumps({"setup": {"events": len(generated.events), "planted": len(generated.planted),
                                    "listings": len(houses), "queries": len(searches),
                                    "machine": f"{os.cpu_count()} cores, {platform.machine()}"}}), flush=True)
        expected = sorted((p.rule, p.host) for p in generated.planted)
        compiled = [CompiledRule(r) for r in ruleset("intrusion")]
        spark = session("bench-cep", shuffle_partitions=2)
        for round_no in range(args.rounds):
            cep = run_pipeline(spark, "cep", "security-events", bootstrap, workdir, round_no)
            alerts = sorted((a["rule"], next(iter(a["key"].values()))) for a in cep.pop("output"))
            print(json.dumps({"round": round_no, "what": "rules on Spark", **cep,
                              "alerts_equal_planted": alerts == expected}), flush=True)
            results.setdefault("rules_spark", []).append(cep["events_per_s"])
            results.setdefault("rules_spark_steady", []).append(cep["steady_events_per_s"])

            watch = run_pipeline(spark, "watch", "listings", bootstrap, workdir, round_no)
            hits = sum(len(r["query_ids"]) for r in watch.pop("output"))
            print(json.dumps({"round": round_no, "what": "stored queries on Spark", **watch,
                              "matches_per_event": round(hits / max(1, watch["rows"]), 1)}), flush=True)
            results.setdefault("queries_spark", []).append(watch["events_per_s"])
            results.setdefault("queries_spark_steady", []).append(watch["steady_events_per_s"])

            began = time.perf_counter()
            found = [m for rule in compiled for m in match_events(rule, generated.events)]
            seconds = time.perf_counter() - began
            ok = sorted((m.rule, m.key[0]) for m in found) == expected
            print(json.dumps({"round": round_no, "what": "rules, pure Python, one core",
                              "events_per_s": round(len(generated.events) / seconds), "alerts_equal_planted": ok}),
                  flush=True)
            results.setdefault("rules_python", []).append(len(generated.events) / seconds)

            index = QueryIndex()
            for i, text in enumerate(searches):
                index.add(f"s{i}", text)
            sample = houses[:5000]
            began = time.perf_counter()
            matched = sum(len(index.match(e)) for e in sample)
            seconds = time.perf_counter() - began
            print(json.dumps({"round": round_no, "what": "stored queries, pure Python, one core",
                              "events_per_s": round(len(sample) / seconds),
                              "evaluated_per_event": round(index.evaluated / len(sample), 1),
                              "matches_per_event": round(matched / len(sample), 1)}), flush=True)
            results.setdefault("queries_python", []).append(len(sample) / seconds)
        spark.stop()
    summary = {name: {"median": round(statistics.median(v)), "min": round(min(v)), "max": round(max(v))}
               for name, v in results.items()}
    print(json.dumps({"summary": summary, "targets": {"rules_spark": 100_000, "queries_spark": 10_000}}))


if __name__ == "__main__":
    main()
