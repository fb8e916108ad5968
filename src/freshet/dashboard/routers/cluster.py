"""The Cluster tab: brokers (fenced or alive, the active controller), leaders and replicas per broker, partitions'
ISRs, the under-replicated and offline ones, and reassignments in progress (``cluster.py`` reads them)."""

from __future__ import annotations

from fastapi import APIRouter

from . import Source

router = APIRouter()


@router.get("/api/cluster")
async def cluster(collector: Source) -> dict:
    snap = collector.snapshot
    return {"at": snap.at, "error": snap.error, **snap.cluster}
