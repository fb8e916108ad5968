"""Spark pipelines announced in the pipeline registry: their progress and rates, stop and restart. A signed-in
user sees them only if they may READ the registry (``readable_to``), asks a stop as themselves (a write to the
control topic their ACLs allow or refuse), and a pipeline they restart runs with their credentials."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

from confluent_kafka import KafkaException
from fastapi import APIRouter, HTTPException, Request

from freshet.client.pipeline_registry import PIPELINES_TOPIC

from ..collector import SPARK_SERIES
from ..refusals import refusal
from . import Credentials, Source, history, one, readable_to, unreadable

router = APIRouter()


async def shown_to(request: Request) -> None:
    """A 403 line when the signed-in user may not READ the pipeline registry."""
    readable = await asyncio.to_thread(readable_to, request, (PIPELINES_TOPIC,))
    if readable is not None and PIPELINES_TOPIC not in readable:
        raise unreadable(PIPELINES_TOPIC, "the pipelines")


def registered(collector, name: str) -> dict:
    return one(collector.snapshot.pipelines, name, f"pipeline {name!r} is not registered")


@router.get("/api/pipelines")
async def pipelines(request: Request, collector: Source) -> dict:
    await shown_to(request)
    return {name: {**p, "rates": history(collector, f"pipeline:{name}"),
                   "charts": {series: history(collector, f"spark:{series}:{name}") for series in SPARK_SERIES}}
            for name, p in collector.snapshot.pipelines.items()}


@router.post("/api/pipelines/{name}/stop")
async def stop_pipeline(name: str, request: Request, collector: Source, credentials: Credentials) -> dict:
    from freshet.client.pipeline_registry import request_stop

    from freshet.client.errors import ClientError

    await shown_to(request)
    registered(collector, name)
    try:
        await asyncio.to_thread(request_stop, collector.bootstrap, name, overrides=credentials)
    except ClientError as exc:
        raise HTTPException(403 if "AUTHORIZATION_FAILED" in str(exc) else 503, str(exc)) from None
    except KafkaException as exc:  # the user's producer refused outright (no WRITE anywhere: no producer id)
        raise refusal(exc, f"cannot ask pipeline {name!r} to stop") from None
    return {"name": name, "requested": "stop"}


@router.post("/api/pipelines/{name}/restart")
async def restart_pipeline(name: str, request: Request, collector: Source, credentials: Credentials) -> dict:
    await shown_to(request)
    record = registered(collector, name)
    if record.get("status") == "running":
        raise HTTPException(409, f"pipeline {name!r} is running")
    if not record.get("command") or record.get("host") != socket.gethostname():
        raise HTTPException(400, f"pipeline {name!r} was not started by freshet run on this host")
    env = dict(os.environ)
    if credentials:  # the pipeline runs as the user who restarted it (FRESHET_SASL_*: see client/config.py)
        env.update({f"FRESHET_{k.upper().replace('.', '_')}": v for k, v in credentials.items()})
    with open(os.devnull, "wb") as log:
        subprocess.Popen([sys.executable, "-m", "freshet.cli.main", *record["command"], "--bootstrap",
                          collector.bootstrap], stdout=log, stderr=log, start_new_session=True, env=env)
    return {"name": name, "requested": "restart"}
