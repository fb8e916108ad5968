"""The Cluster tab: brokers (fenced or alive, the active controller), leaders and replicas per broker, partitions'
ISRs, the under-replicated and offline ones, and reassignments in progress (``cluster.py`` reads them)."""

from __future__ import annotations

from fastapi import APIRouter

from . import Source, Visible

router = APIRouter()
BY_PARTITION = ("under_replicated", "offline", "reassignments")


@router.get("/api/cluster")
async def cluster(collector: Source, visible: Visible) -> dict:
    """The Cluster tab; a signed-in user sees the partitions of the topics their Metadata names (the brokers and
    their counts are the cluster's)."""
    snap = collector.snapshot
    answer = {"at": snap.at, "error": snap.error, **snap.cluster}
    if visible is not None and snap.cluster:
        topics = visible[0]
        answer["topics"] = [t for t in answer["topics"] if t["name"] in topics]
        for key in BY_PARTITION:
            if answer.get(key) is not None:
                answer[key] = [p for p in answer[key] if p["topic"] in topics]
    return answer
