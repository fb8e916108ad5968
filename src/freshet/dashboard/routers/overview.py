"""The page itself, the overview every tab starts from, and its live updates (server-sent events)."""

from __future__ import annotations

import asyncio
import json
import os

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, StreamingResponse

from freshet.client.cdc_registry import CDC_TOPIC
from freshet.client.application_registry import REGISTRY_TOPIC as APPLICATIONS_TOPIC
from freshet.client.ingest_registry import INGEST_TOPIC
from freshet.client.pipeline_registry import PIPELINES_TOPIC

from ..collector import SQL_TOPIC, Collector
from . import Source, Visible, readable_to, visible_to

router = APIRouter()
STATIC = os.path.join(os.path.dirname(os.path.dirname(__file__)), "static")
# the data-flow graph's nodes that come from a registry topic: a signed-in user sees them if they may READ it
REGISTRIES = {"pipeline": PIPELINES_TOPIC, "projection": APPLICATIONS_TOPIC, "ingest": INGEST_TOPIC, "sql": SQL_TOPIC,
              "cdc": CDC_TOPIC}
TOPIC_FIELDS = ("messages", "size_bytes", "rate_in", "rate_out", "internal", "retention_ms", "retention_bytes",
                "cleanup_policy")


def overview_of(collector: Collector, visible: tuple[set[str], set[str]] | None = None,
                pipelines: bool = True) -> dict:
    """The overview; ``visible``: the (topics, groups) a signed-in user may see (``visible_to``), the rest left
    out, as the cluster leaves them out of that user's own Metadata and ListGroups; ``pipelines``: whether they
    may READ the pipeline registry (else none is listed)."""
    snap = collector.snapshot
    topics, groups = visible if visible is not None else (None, None)
    return {"at": snap.at, "brokers": snap.brokers, "error": snap.error,
            "topics": {n: {k: t.get(k) for k in TOPIC_FIELDS} | {"partitions": len(t["partitions"])}
                       for n, t in snap.topics.items() if topics is None or n in topics},
            "groups": {g: {"type": x.get("type", "classic"), "state": x["state"], "total_lag": x["total_lag"],
                           "alert": x["alert"], "members": len(x["members"])} for g, x in snap.groups.items()
                       if groups is None or g in groups},
            "pipelines": {n: {"status": p.get("status"), "progress": p.get("progress")}
                          for n, p in snap.pipelines.items() if pipelines}}


@router.get("/", response_class=HTMLResponse)
async def index() -> str:
    with open(os.path.join(STATIC, "index.html")) as f:
        return f.read()


def seen_by(request: Request) -> tuple[tuple[set[str], set[str]] | None, bool]:
    """What the overview may show the request's user: (``visible_to``, whether they may READ the pipeline
    registry). Blocking."""
    readable = readable_to(request, (PIPELINES_TOPIC,))
    return visible_to(request), readable is None or PIPELINES_TOPIC in readable


@router.get("/api/overview")
async def overview(request: Request, collector: Source) -> dict:
    return overview_of(collector, *await asyncio.to_thread(seen_by, request))


@router.get("/api/events")
async def events(request: Request, collector: Source) -> StreamingResponse:
    async def stream():
        last = None
        while not await request.is_disconnected():
            snap = collector.snapshot
            if snap.at != last:
                last = snap.at
                yield f"data: {json.dumps(overview_of(collector, *await asyncio.to_thread(seen_by, request)))}\n\n"
            await asyncio.sleep(0.5)

    return StreamingResponse(stream(), media_type="text/event-stream")


@router.get("/api/dataflow")
async def dataflow(request: Request, collector: Source, visible: Visible) -> dict:
    """Topics and what writes and reads them, each edge with its rate and lag (see ``dataflow.py``); a signed-in
    user's graph leaves out the topics and groups their own Metadata and ListGroups do not name, and the
    pipelines, projections, ingest endpoints, CDC connectors and SQL queries of registries they may not READ (with the sinks
    only those wrote)."""
    from ..dataflow import graph

    found = graph(collector.snapshot)
    if visible is not None:
        topics, groups = visible
        readable = await asyncio.to_thread(readable_to, request, tuple(REGISTRIES.values()))
        hidden = {n["id"] for n in found["nodes"] if (n["kind"] == "topic" and n["label"] not in topics)
                  or (n["kind"] in ("group", "share-group") and n["label"] not in groups)
                  or (n["kind"] in REGISTRIES and REGISTRIES[n["kind"]] not in readable)}
        edges = [e for e in found["edges"] if e["from"] not in hidden and e["to"] not in hidden]
        ends = {e["from"] for e in edges} | {e["to"] for e in edges}
        found = {"nodes": [n for n in found["nodes"] if n["id"] not in hidden
                           and (n["kind"] != "sink" or n["id"] in ends)], "edges": edges}
    return found
