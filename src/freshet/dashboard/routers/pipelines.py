"""Spark pipelines announced in the pipeline registry: their progress and rates, stop and restart."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

from fastapi import APIRouter, HTTPException

from . import Source, history, one

router = APIRouter()


def registered(collector, name: str) -> dict:
    return one(collector.snapshot.pipelines, name, f"pipeline {name!r} is not registered")


@router.get("/api/pipelines")
async def pipelines(collector: Source) -> dict:
    return {name: {**p, "rates": history(collector, f"pipeline:{name}")}
            for name, p in collector.snapshot.pipelines.items()}


@router.post("/api/pipelines/{name}/stop")
async def stop_pipeline(name: str, collector: Source) -> dict:
    from freshet.client.pipeline_registry import request_stop

    from freshet.client.errors import ClientError

    registered(collector, name)
    try:
        await asyncio.to_thread(request_stop, collector.bootstrap, name)
    except ClientError as exc:
        raise HTTPException(503, str(exc)) from None
    return {"name": name, "requested": "stop"}


@router.post("/api/pipelines/{name}/restart")
async def restart_pipeline(name: str, collector: Source) -> dict:
    record = registered(collector, name)
    if record.get("status") == "running":
        raise HTTPException(409, f"pipeline {name!r} is running")
    if not record.get("command") or record.get("host") != socket.gethostname():
        raise HTTPException(400, f"pipeline {name!r} was not started by freshet run on this host")
    with open(os.devnull, "wb") as log:
        subprocess.Popen([sys.executable, "-m", "freshet.cli.main", *record["command"], "--bootstrap",
                          collector.bootstrap], stdout=log, stderr=log, start_new_session=True)
    return {"name": name, "requested": "restart"}
