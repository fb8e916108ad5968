"""What runs around the log and announces itself in compacted topics: event-sourced applications and their
projections, ingest servers, stored CEP rules and search queries, and clients pushing their metrics (KIP-714)."""

from __future__ import annotations

import copy

from fastapi import APIRouter

from . import Source, history

router = APIRouter()


@router.get("/api/applications")
async def applications(collector: Source) -> dict:
    """Event-sourced applications: events per aggregate type, and each projection's position and lag
    (with its lag history)."""
    out = copy.deepcopy(collector.snapshot.applications)
    for name, a in out.items():
        for projection, p in a["projections"].items():
            p["lag_history"] = history(collector, f"projection:{name}/{projection}")
    return out


@router.get("/api/ingest")
async def ingest(collector: Source) -> dict:
    """Ingest servers: each endpoint's protocol, address, topic, backpressure policy and counters."""
    return collector.snapshot.ingest


@router.get("/api/clients")
async def clients(collector: Source) -> dict:
    """Clients that push their metrics to the broker (KIP-714): request latency, queue time, fetch latency,
    assigned partitions, and the bytes per second each produced and fetched."""
    return collector.snapshot.clients


@router.get("/api/rules")
async def rules(collector: Source) -> dict:
    """Stored CEP rules and search queries (what `freshet run cep` and `freshet run watch` match)."""
    return collector.snapshot.rules
