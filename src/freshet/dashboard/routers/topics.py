"""A topic's page (partitions, configs, rate history), its administration (create, delete, configs, partitions,
delete records) and open transactions (its records: messages.py)."""

from __future__ import annotations

import asyncio

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic
from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field

from ..refusals import refusal
from . import Admin, Credentials, Source, history, one

router = APIRouter()
TIMEOUT_S = 30


def existing(collector, name: str) -> dict:
    return one(collector.snapshot.topics, name, f"topic {name!r} does not exist")


def configs_of(collector, admin, name: str) -> dict:
    """The topic's configs as the acting user may read them (a refusal: its one line, 403)."""
    try:
        return collector.topic_configs(name, admin)
    except KafkaException as exc:
        raise refusal(exc, f"cannot read the configs of {name!r}") from None


@router.get("/api/topics/{name}")
async def topic(name: str, collector: Source, admin: Admin) -> dict:
    t = existing(collector, name)
    configs = await asyncio.to_thread(configs_of, collector, admin, name)
    return {"name": name, **t, "configs": configs, "rates": history(collector, f"topic:{name}")}


@router.get("/api/transactions")
async def transactions(collector: Source, credentials: Credentials) -> dict:
    """Every transactional id (a signed-in user: those the cluster lets them describe, asked as them); for the
    open ones, each partition's last stable offset and how many records it holds back behind the high watermark
    (read_committed readers wait for those)."""
    from freshet.client.errors import ClientError
    from freshet.client.transactions import describe_transaction, list_transactions

    def gather() -> dict:
        out = {}
        for t in list_transactions(collector.bootstrap, overrides=credentials):
            entry = {"producer_id": t.producer_id, "state": t.state, "partitions": []}
            if t.state == "Ongoing":
                try:
                    d = describe_transaction(t.transactional_id, collector.bootstrap, overrides=credentials)
                except ClientError:  # ended (or moved) since it was listed
                    out[t.transactional_id] = entry
                    continue
                entry.update(producer_epoch=d.producer_epoch, start_time_ms=d.start_time_ms, timeout_ms=d.timeout_ms)
                entry["partitions"] = [{"topic": topic, "partition": p, "last_stable_offset": lso,
                                        "high_watermark": hw, "held_back": hw - lso}
                                       for (topic, p), (lso, hw) in sorted(d.partitions.items())]
            out[t.transactional_id] = entry
        return out

    return await asyncio.to_thread(gather)


# -- administration: each call is the cluster's own (CreateTopics, DeleteTopics, IncrementalAlterConfigs,
# CreatePartitions, DeleteRecords); its refusal comes back as a 4xx with the broker's error name and message.

class NewTopicBody(BaseModel):
    name: str
    partitions: int = Field(1, ge=1)
    replication_factor: int | None = Field(None, ge=1)  # none: the broker's default.replication.factor
    configs: dict[str, str] = {}


class ConfigChange(BaseModel):
    set: dict[str, str] = {}
    delete: list[str] = []


class PartitionCount(BaseModel):
    count: int = Field(ge=1)


class RecordsBefore(BaseModel):
    partition: int = Field(ge=0)
    before_offset: int = Field(ge=-1)  # -1: the high watermark (everything)


def done(future, what: str):
    try:
        return future.result(TIMEOUT_S)
    except KafkaException as exc:
        raise refusal(exc, what) from None


@router.post("/api/topics", status_code=201)
async def create_topic(body: NewTopicBody, admin: Admin) -> dict:
    new = NewTopic(body.name, body.partitions, body.replication_factor or -1, config=body.configs)
    await asyncio.to_thread(
        done, admin.create_topics([new], operation_timeout=TIMEOUT_S)[body.name],
        f"cannot create topic {body.name!r}")
    return {"name": body.name, "partitions": body.partitions}


@router.delete("/api/topics/{name}")
async def delete_topic(name: str, admin: Admin, confirm: str = "") -> dict:
    """Typed confirmation: ``confirm`` must repeat the topic's name."""
    if confirm != name:
        raise HTTPException(400, f"to delete topic {name!r}, confirm with its name (confirm={name})")
    await asyncio.to_thread(done, admin.delete_topics([name], operation_timeout=TIMEOUT_S)[name],
                            f"cannot delete topic {name!r}")
    return {"deleted": name}


@router.patch("/api/topics/{name}/configs")
async def alter_configs(name: str, change: ConfigChange, collector: Source, admin: Admin) -> dict:
    """IncrementalAlterConfigs: ``set`` names and values, ``delete`` names (back to the default). The broker
    validates the whole request before applying any of it, so a refusal changes nothing."""
    if not change.set and not change.delete:
        raise HTTPException(400, "nothing to change: give set {name: value} and/or delete [name]")
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in change.set.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in change.delete]
    resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=entries)
    await asyncio.to_thread(done, admin.incremental_alter_configs([resource])[resource],
                            f"cannot change configs of {name!r}")
    return {"name": name, "configs": await asyncio.to_thread(configs_of, collector, admin, name)}


@router.post("/api/topics/{name}/partitions")
async def add_partitions(name: str, body: PartitionCount, admin: Admin) -> dict:
    """CreatePartitions: ``count`` is the new total; fewer than the topic has is the broker's INVALID_PARTITIONS."""
    await asyncio.to_thread(done, admin.create_partitions([NewPartitions(name, body.count)])[name],
                            f"cannot grow topic {name!r}")
    return {"name": name, "partitions": body.count}


@router.post("/api/topics/{name}/delete-records")
async def delete_records(name: str, body: RecordsBefore, admin: Admin) -> dict:
    """DeleteRecords: the partition's log start moves to ``before_offset`` (-1: the high watermark)."""
    tp = TopicPartition(name, body.partition, body.before_offset)
    result = await asyncio.to_thread(done, admin.delete_records([tp])[tp],
                                     f"cannot delete records of {name}-{body.partition}")
    return {"name": name, "partition": body.partition, "log_start_offset": result.low_watermark}
