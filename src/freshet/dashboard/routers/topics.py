"""A topic's page (partitions, configs, rate history) and open transactions (its records: messages.py)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter

from . import Source, history, one

router = APIRouter()


def existing(collector, name: str) -> dict:
    return one(collector.snapshot.topics, name, f"topic {name!r} does not exist")


@router.get("/api/topics/{name}")
async def topic(name: str, collector: Source) -> dict:
    t = existing(collector, name)
    configs = await asyncio.to_thread(collector.topic_configs, name)
    return {"name": name, **t, "configs": configs, "rates": history(collector, f"topic:{name}")}


@router.get("/api/transactions")
async def transactions(collector: Source) -> dict:
    """Every transactional id; for the open ones, each partition's last stable offset and how many
    records it holds back behind the high watermark (read_committed readers wait for those)."""
    from freshet.client.transactions import describe_transaction, list_transactions

    def gather() -> dict:
        out = {}
        for t in list_transactions(collector.bootstrap):
            entry = {"producer_id": t.producer_id, "state": t.state, "partitions": []}
            if t.state == "Ongoing":
                d = describe_transaction(t.transactional_id, collector.bootstrap)
                entry.update(producer_epoch=d.producer_epoch, start_time_ms=d.start_time_ms, timeout_ms=d.timeout_ms)
                entry["partitions"] = [{"topic": topic, "partition": p, "last_stable_offset": lso,
                                        "high_watermark": hw, "held_back": hw - lso}
                                       for (topic, p), (lso, hw) in sorted(d.partitions.items())]
            out[t.transactional_id] = entry
        return out

    return await asyncio.to_thread(gather)
