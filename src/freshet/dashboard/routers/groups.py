"""Consumer groups (classic, consumer and share) with their members, lag per partition and lag history."""

from __future__ import annotations

from fastapi import APIRouter

from . import Source, history, one

router = APIRouter()


@router.get("/api/groups")
async def groups(collector: Source) -> dict:
    return collector.snapshot.groups


@router.get("/api/groups/{group_id}")
async def group(group_id: str, collector: Source) -> dict:
    g = one(collector.snapshot.groups, group_id, f"group {group_id!r} does not exist")
    return {"group_id": group_id, **g, "lag_history": history(collector, f"lag:{group_id}")}
