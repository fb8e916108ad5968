"""Consumer groups (classic, consumer and share) with their members, lag per partition and lag history; offset
resets (a dry run first, as ``kafka-consumer-groups.sh --reset-offsets`` does) and deleting a group."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import datetime
from typing import Literal

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel

from freshet.client.errors import ClientError

from ..refusals import refusal
from . import Admin, Source, Visible, history, one

router = APIRouter()
TIMEOUT_S = 30


@router.get("/api/groups")
async def groups(collector: Source, visible: Visible) -> dict:
    """Every group (a signed-in user: those their ListGroups names)."""
    return {g: x for g, x in collector.snapshot.groups.items() if visible is None or g in visible[1]}


@router.get("/api/lag-history")
async def lag_history(collector: Source, visible: Visible, limit: int = Query(8, ge=1, le=50)) -> dict:
    """The Groups tab's chart: the total lag (a share group's backlog) of the ``limit`` groups lagging most now
    (then by name; a signed-in user: of the groups they see), each a sample a collector round."""
    groups = {g: x for g, x in collector.snapshot.groups.items() if visible is None or g in visible[1]}
    chosen = sorted(groups, key=lambda g: (-(groups[g].get("total_lag") or 0), g))[:limit]
    return {"groups": {g: history(collector, f"lag:{g}") for g in sorted(chosen)}}


@router.get("/api/groups/{group_id}")
async def group(group_id: str, collector: Source, visible: Visible) -> dict:
    if visible is not None and group_id not in visible[1]:
        raise HTTPException(404, f"group {group_id!r} does not exist")  # as the cluster answers that user
    g = one(collector.snapshot.groups, group_id, f"group {group_id!r} does not exist")
    return {"group_id": group_id, **g, "lag_history": history(collector, f"lag:{group_id}"),
            # the partitions lagging most now (CHARTED_PARTITIONS of them), each with its lag a round
            "partition_lag_history": collector.partition_lag_history(group_id)}


class Reset(BaseModel):
    topic: str | None = None
    topics: list[str] | None = None  # several at once (as --topic a --topic b): each row then names its topic
    partitions: list[int] | None = None  # none: every partition of the topic (one topic only)
    to: Literal["earliest", "latest", "timestamp", "shift", "offset", "duration"]
    # timestamp: epoch ms or an ISO time; shift: N (negative: back); offset: N; duration: PnDTnHnMnS or ms back
    value: int | str | None = None
    dry_run: bool = True


VALUES = {"timestamp": "epoch milliseconds or an ISO time", "shift": "N, negative: back", "offset": "N",
          "duration": "PnDTnHnMnS, e.g. PT1H, or milliseconds"}
DURATION = re.compile(r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$")


def duration_ms(value: int | str) -> int:
    """``--by-duration``'s PnDTnHnMnS (or milliseconds) in milliseconds; a 400 otherwise."""
    if isinstance(value, int):
        if value < 0:
            raise HTTPException(400, f"a duration is not negative: {value}")
        return value
    found = DURATION.match(value.strip().upper())
    if found is None or value.strip().upper() in ("P", "PT"):
        raise HTTPException(400, f"not a duration: {value!r} ({VALUES['duration']})")
    d, h, m, sec = (float(found[k] or 0) for k in "dhms")
    return int((((d * 24 + h) * 60 + m) * 60 + sec) * 1000)


def target(reset: Reset) -> dict:
    """GroupAdmin.plan_reset's keyword for ``reset.to``; a 400 when ``value`` does not fit (``to=offset``:
    {"to_offset": N}, which reset_offsets plans itself)."""
    if reset.to in ("earliest", "latest"):
        return {f"to_{reset.to}": True}
    if reset.value is None:
        raise HTTPException(400, f"to={reset.to} needs a value ({VALUES[reset.to]})")
    if reset.to == "duration":
        return {"to_timestamp_ms": int(time.time() * 1000) - duration_ms(reset.value)}
    if reset.to == "offset":
        try:
            offset = int(reset.value)
        except ValueError:
            raise HTTPException(400, f"offset needs a whole number, not {reset.value!r}") from None
        if offset < 0:
            raise HTTPException(400, f"an offset is not negative: {offset}")
        return {"to_offset": offset}
    if reset.to == "shift":
        try:
            return {"shift_by": int(reset.value)}
        except ValueError:
            raise HTTPException(400, f"shift needs a whole number, not {reset.value!r}") from None
    if isinstance(reset.value, int):
        return {"to_timestamp_ms": reset.value}
    try:
        when = datetime.fromisoformat(reset.value.replace("Z", "+00:00"))
    except ValueError:
        raise HTTPException(400, f"not a time: {reset.value!r} (epoch milliseconds or ISO, e.g. "
                                 "2026-11-25T10:00:00Z)") from None
    if when.tzinfo is None:
        raise HTTPException(400, f"{reset.value!r} has no time zone (add Z or +01:00)")
    return {"to_timestamp_ms": int(when.timestamp() * 1000)}


def plan_one(planner, group_id: str, topic: str, partitions: list[int] | None, wanted: dict) -> list:
    """(partition, current, new) for one topic; nothing committed."""
    if "to_offset" in wanted:  # as kafka-consumer-groups.sh --to-offset: clamped to each partition's log
        lows = planner.plan_reset(group_id, topic, partitions, to_earliest=True)
        highs = {p: high for p, _, high in planner.plan_reset(group_id, topic, partitions, to_latest=True)}
        return [(p, old, min(max(wanted["to_offset"], low), highs[p])) for p, old, low in lows]
    return planner.plan_reset(group_id, topic, partitions, **wanted)


def reset_offsets(collector, admin, group_id: str, reset: Reset) -> dict:
    """The plan from the dashboard's reads; the commit (not on a dry run) through ``admin``: the signed-in
    user's, so the cluster's ACLs decide."""
    if (reset.topic is None) == (reset.topics is None) or reset.topics == []:
        raise HTTPException(400, "give topic (one) or topics (a list)")
    if reset.topics is not None and reset.partitions is not None:
        raise HTTPException(400, "partitions go with one topic, not with topics")
    names = [reset.topic] if reset.topic is not None else list(dict.fromkeys(reset.topics))
    wanted = target(reset)
    try:
        plan = [(t, p, old, new) for t in names for p, old, new in plan_one(collector.groups_admin, group_id, t,
                                                                            reset.partitions, wanted)]
    except ClientError as exc:
        raise HTTPException(404 if "does not exist" in str(exc) else 400, str(exc)) from None
    try:  # a group nobody has used answers Dead, without members
        members = len(collector.admin.describe_consumer_groups([group_id])[group_id].result(TIMEOUT_S).members)
    except KafkaException as exc:
        raise refusal(exc, f"cannot describe group {group_id!r}") from None
    several = reset.topics is not None
    answer = {"group_id": group_id, **({"topics": names} if several else {"topic": reset.topic}),
              "dry_run": reset.dry_run, "active_members": members,
              "partitions": [{**({"topic": t} if several else {}), "partition": p,
                              "current": old if old >= 0 else None, "new": new} for t, p, old, new in plan]}
    if reset.dry_run:
        return answer
    what = f"cannot reset offsets of group {group_id!r}"
    future = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group_id, [TopicPartition(t, p, new) for t, p, _, new in plan])])[group_id]
    try:
        result = future.result(TIMEOUT_S)
        failed = next((tp.error for tp in result.topic_partitions if tp.error is not None), None)
        if failed is not None:
            raise KafkaException(failed)
    except KafkaException as exc:
        refused = refusal(exc, what)
        if refused.status_code == 409 and members:
            refused.detail += (f" (the group has {members} active member(s); Kafka resets the offsets of an "
                               "empty group only: stop its consumers first)")
        raise refused from None
    return answer


@router.post("/api/groups/{group_id}/reset-offsets")
async def reset(group_id: str, body: Reset, collector: Source, admin: Admin) -> dict:
    """Each partition's current and new committed offset; committed unless ``dry_run`` (the default). The
    broker refuses the commit (409, its reason) while the group has active members."""
    return await asyncio.to_thread(reset_offsets, collector, admin, group_id, body)


@router.delete("/api/groups/{group_id}")
async def delete_group(group_id: str, admin: Admin) -> dict:
    """DeleteGroups: refused by the broker (409 NON_EMPTY_GROUP) while the group has members."""
    def run() -> None:
        try:
            admin.delete_consumer_groups([group_id], request_timeout=TIMEOUT_S)[group_id].result(TIMEOUT_S)
        except KafkaException as exc:
            raise refusal(exc, f"cannot delete group {group_id!r}") from None

    await asyncio.to_thread(run)
    return {"deleted": group_id}
