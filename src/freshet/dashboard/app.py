"""The dashboard's HTTP side: a page, a JSON API, server-sent events for live updates, and /metrics. The routes
live in ``routers/``, one module per concern; they reach the collector through ``app.state``."""

from __future__ import annotations

import os

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from .collector import Collector
from .login import KafkaLogin
from .routers import (access, cluster, groups, messages, metrics, overview, pipelines, security, services, sql,
                      topics)

HERE = os.path.dirname(__file__)


def create_app(collector: Collector, token: str | None = None, login: KafkaLogin | None = None,
               sql_endpoint=None) -> FastAPI:
    """``token``: every request must carry it (scripts, or a dashboard bound beyond loopback); ``login``: browsers
    sign in with a Kafka user (see ``login.py``); a request with the token needs no session."""
    app = FastAPI(title="Freshet dashboard", docs_url=None, redoc_url=None)
    app.state.collector, app.state.token, app.state.login = collector, token, login
    app.state.visible = {}  # session -> (asked at, topics, groups) the signed-in user may see (routers.visible_to)
    app.state.readable = {}  # session -> {topic: (asked at, may READ)} (routers.readable_to)
    app.state.sql = sql_endpoint  # POST /sql runs statements through it (routers/sql.py); None: no SQL served
    app.state.metrics = metrics.registry_for(collector)
    app.middleware("http")(access.require_access)
    app.mount("/static", StaticFiles(directory=os.path.join(HERE, "static")), name="static")
    for module in (access, overview, cluster, messages, topics, groups, security, pipelines, services, metrics, sql):
        app.include_router(module.router)
    return app
