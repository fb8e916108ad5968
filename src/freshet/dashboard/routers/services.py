"""What runs around the log and announces itself in compacted topics: event-sourced applications and their
projections, ingest servers, stored CEP rules and search queries, and clients pushing their metrics (KIP-714).

A signed-in user sees a tab only when they may READ the topic it is made from (``readable_to``, asked as them),
else the tab's one line says so (403); its entries on topics their Metadata does not name are left out. The
Clients tab is the cluster's: it needs DESCRIBE_CONFIGS on the cluster."""

from __future__ import annotations

import asyncio
import copy

from fastapi import APIRouter, HTTPException, Request

from freshet.client.application_registry import REGISTRY_TOPIC as APPLICATIONS_TOPIC
from freshet.client.ingest_registry import INGEST_TOPIC
from freshet.client.stored import RULES_TOPIC, WATCHES_TOPIC

from . import Source, history, readable_to, sees_cluster, unreadable, visible_to

router = APIRouter()


def topics_for(request: Request, topic: str, what: str) -> set[str] | None:
    """The topics a signed-in user may see once they may READ ``topic`` (a 403 saying so otherwise); None: no
    sign-in. Blocking."""
    readable = readable_to(request, (topic,))
    if readable is None:
        return None
    if topic not in readable:
        raise unreadable(topic, what)
    return visible_to(request)[0]


@router.get("/api/applications")
async def applications(request: Request, collector: Source) -> dict:
    """Event-sourced applications: events per aggregate type, and each projection's position and lag
    (with its lag history)."""
    topics = await asyncio.to_thread(topics_for, request, APPLICATIONS_TOPIC, "the event-sourced applications")
    out = {name: a for name, a in copy.deepcopy(collector.snapshot.applications).items()
           if topics is None or a.get("events_topic") in topics}
    for name, a in out.items():
        for projection, p in a["projections"].items():
            p["lag_history"] = history(collector, f"projection:{name}/{projection}")
    return out


@router.get("/api/ingest")
async def ingest(request: Request, collector: Source) -> dict:
    """Ingest servers: each endpoint's protocol, address, topic, backpressure policy and counters."""
    topics = await asyncio.to_thread(topics_for, request, INGEST_TOPIC, "the ingest servers")
    if topics is None:
        return collector.snapshot.ingest
    return {name: {**server, "endpoints": {e: x for e, x in server.get("endpoints", {}).items()
                                           if x.get("topic") is None or x["topic"] in topics}}
            for name, server in collector.snapshot.ingest.items()}


@router.get("/api/undecodable")
async def undecodable(request: Request, collector: Source) -> dict:
    """Per registry topic, its latest records that do not decode (``registries.py``): partition, offset, key, size
    and why, each shown on its tab while the rest of the tab shows what decodes; a signed-in user gets those of the
    topics they may READ."""
    marks = collector.snapshot.undecodable
    readable = await asyncio.to_thread(readable_to, request, tuple(marks)) if marks else None
    return {topic: m for topic, m in marks.items() if readable is None or topic in readable}


@router.get("/api/clients")
async def clients(request: Request, collector: Source) -> dict:
    """Clients that push their metrics to the broker (KIP-714): request latency, queue time, fetch latency,
    assigned partitions, and the bytes per second each produced and fetched."""
    if await asyncio.to_thread(sees_cluster, request) is False:
        raise HTTPException(403, "cannot show the clients: CLUSTER_AUTHORIZATION_FAILED: this user may not "
                                 "describe the cluster's configs (DESCRIBE_CONFIGS on the cluster)")
    return collector.snapshot.clients


@router.get("/api/rules")
async def rules(request: Request, collector: Source) -> dict:
    """Stored CEP rules and search queries (what `freshet run cep` and `freshet run watch` match); a signed-in
    user sees each kind only if they may READ its topic (``refused`` says which they may not)."""
    readable = await asyncio.to_thread(readable_to, request, (RULES_TOPIC, WATCHES_TOPIC))
    if readable is None:
        return collector.snapshot.rules
    if not readable:
        raise unreadable(f"{RULES_TOPIC} or {WATCHES_TOPIC}", "the rules and stored queries")
    out = {"rules": {}, "queries": {}}
    for kind, topic in (("rules", RULES_TOPIC), ("queries", WATCHES_TOPIC)):
        if topic in readable:
            out[kind] = collector.snapshot.rules.get(kind, {})
        else:
            out["refused"] = f"cannot show the stored {kind}: TOPIC_AUTHORIZATION_FAILED: this user may not read {topic}"
    return out
