"""What runs around the log and announces itself in compacted topics: event-sourced applications and their
projections, ingest servers, CDC connectors, stored CEP rules and search queries, and clients pushing their metrics (KIP-714).

A signed-in user sees a tab only when they may READ the topic it is made from (``readable_to``, asked as them),
else the tab's one line says so (403); its entries on topics their Metadata does not name are left out. The
Clients tab is the cluster's: it needs DESCRIBE_CONFIGS on the cluster."""

from __future__ import annotations

import asyncio
import copy

from confluent_kafka import KafkaException
from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel

from freshet.client.cdc_registry import CDC_TOPIC
from freshet.client.application_registry import REGISTRY_TOPIC as APPLICATIONS_TOPIC
from freshet.client.errors import ClientError
from freshet.client.ingest_registry import INGEST_TOPIC
from freshet.client.stored import RULES_TOPIC, WATCHES_TOPIC

from ..refusals import refusal
from . import Credentials, Source, history, readable_to, sees_cluster, unreadable, visible_to

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


@router.get("/api/cdc")
async def cdc(request: Request, collector: Source) -> dict:
    """CDC connectors: database (no password), slot, publication, tables, the topics each writes, the slot's lag in
    bytes (with its history) and the last change's time; a signed-in user sees the topics their Metadata names."""
    topics = await asyncio.to_thread(topics_for, request, CDC_TOPIC, "the CDC connectors")
    out = copy.deepcopy(collector.snapshot.cdc)
    for name, c in out.items():
        if topics is not None:
            c["topics"] = [t for t in c.get("topics") or [] if t in topics]
        c["lag_history"] = history(collector, f"cdc:{name}")
    return out


class NewRules(BaseModel):
    text: str  # one rule or several, each from its RULE line (a rules file's text)


class NewQuery(BaseModel):
    text: str  # a stored search query: words, "phrases", field:word, field = value, <, >, IN, AND, OR, NOT
    id: str | None = None  # default: q- and 8 hex digits of the query's SHA-1, as `freshet watch add` names it


def stored(request: Request, topic: str, credentials: dict | None):
    """The stored definitions of ``topic`` read and written as the signed-in user (else the dashboard)."""
    from freshet.client.stored import StoredDefinitions

    return StoredDefinitions(request.app.state.collector.bootstrap, topic, credentials)


def written(request: Request, topic: str, credentials: dict | None, change) -> None:
    """Runs ``change(definitions)`` (a write); the cluster's refusal is one line (403 when it is its ACLs)."""
    definitions = stored(request, topic, credentials)
    try:
        change(definitions)
    except ClientError as exc:
        status = 404 if str(exc).startswith("no ") else 403 if "authorization" in str(exc).lower() else 503
        raise HTTPException(status, str(exc)) from None
    except KafkaException as exc:
        raise refusal(exc, f"cannot write to {topic}") from None
    finally:
        definitions.close()


@router.post("/api/rules", status_code=201)
async def add_rules(body: NewRules, request: Request, credentials: Credentials) -> dict:
    """Store the CEP rules of ``text`` as ``freshet rules add`` does: every rule is parsed first, and if one is wrong
    none is stored (400: its RULE line and why); a rule of the same name is replaced."""
    from freshet.cep.rules import parse_rule
    from freshet.cep.rulesets import split_rules

    texts = split_rules(body.text)
    if not texts:
        raise HTTPException(400, "no rule (each starts with RULE name)")
    rules = []
    for text in texts:
        try:
            rules.append(parse_rule(text))
        except ValueError as exc:
            raise HTTPException(400, f"{text.split(chr(10), 1)[0]}: {exc}") from None
    names = [r.name for r in rules]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise HTTPException(400, f"rule {twice[0]} is given twice")
    await asyncio.to_thread(written, request, RULES_TOPIC, credentials,
                            lambda d: d.put_many([(r.name, r.text) for r in rules]))
    return {"added": {r.name: r.describe() for r in rules}}


@router.delete("/api/rules/{name}")
async def remove_rule(name: str, request: Request, credentials: Credentials) -> dict:
    """Remove a stored rule (404 when there is none); running ``cep`` pipelines drop its partial matches."""
    await asyncio.to_thread(written, request, RULES_TOPIC, credentials, lambda d: d.remove(name))
    return {"removed": name}


@router.post("/api/queries", status_code=201)
async def add_query(body: NewQuery, request: Request, credentials: Credentials) -> dict:
    """Store a search query as ``freshet watch add`` does (400 when it does not parse or its id is not letters,
    digits, '-', '_' and '.'); a query of the same id is replaced."""
    import hashlib

    from freshet.cep.search import parse_query

    try:
        parse_query(body.text)
    except ValueError as exc:
        raise HTTPException(400, f"query: {exc}") from None
    query_id = body.id or "q-" + hashlib.sha1(body.text.encode()).hexdigest()[:8]
    if not query_id.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise HTTPException(400, f"id {query_id!r}: letters, digits, '-', '_' and '.' only")
    await asyncio.to_thread(written, request, WATCHES_TOPIC, credentials, lambda d: d.put(query_id, body.text))
    return {"added": query_id}


@router.delete("/api/queries/{query_id}")
async def remove_query(query_id: str, request: Request, credentials: Credentials) -> dict:
    """Remove a stored search query (404 when there is none)."""
    await asyncio.to_thread(written, request, WATCHES_TOPIC, credentials, lambda d: d.remove(query_id))
    return {"removed": query_id}


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
