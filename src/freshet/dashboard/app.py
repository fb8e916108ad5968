"""The dashboard's HTTP side: a page, a JSON API, server-sent events for live updates, and /metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import os
from datetime import datetime
from urllib.parse import parse_qs

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles

from .collector import Collector
from .login import COOKIE, LOGIN_PAGE, KafkaLogin

HERE = os.path.dirname(__file__)


def create_app(collector: Collector, token: str | None = None, login: KafkaLogin | None = None) -> FastAPI:
    """``token``: every request must carry it (scripts, or a dashboard bound beyond loopback); ``login``: browsers
    sign in with a Kafka user (see ``login.py``); a request with the token needs no session."""
    app = FastAPI(title="Freshet dashboard", docs_url=None, redoc_url=None)

    @app.middleware("http")
    async def require_token(request: Request, call_next):
        given = request.query_params.get("token") or request.headers.get("authorization", "").removeprefix("Bearer ")
        has_token = bool(token) and hmac.compare_digest(given or "", token)
        if login is not None:
            if request.url.path in ("/login", "/logout") or has_token or login.user_of(request.cookies.get(COOKIE)):
                return await call_next(request)
            if request.url.path == "/":
                return RedirectResponse("/login", status_code=303)
            return JSONResponse({"error": "sign in first (/login), or give the token"}, status_code=401)
        if token and not has_token:
            return JSONResponse({"error": "a token is required (?token=... or Authorization: Bearer ...)"},
                                status_code=401)
        return await call_next(request)

    @app.get("/login", response_class=HTMLResponse)
    async def login_page() -> str:
        return LOGIN_PAGE.replace("{error}", "")

    @app.post("/login")
    async def sign_in(request: Request):
        if login is None:
            raise HTTPException(404, "this dashboard has no sign-in (start it with --login)")
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        user, password = form.get("username", [""])[0], form.get("password", [""])[0]
        address = request.client.host if request.client else ""
        session = await asyncio.to_thread(login.sign_in, address, user, password)
        if session is None:
            message = ("too many failed sign-ins from this address; wait a minute" if login.blocked(address)
                       else "wrong user or password")
            return HTMLResponse(LOGIN_PAGE.replace("{error}", f'<p class="error">{message}</p>'), status_code=401)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, session, httponly=True, samesite="strict", max_age=int(login.session_s))
        return response

    @app.post("/logout")
    async def sign_out(request: Request):
        if login is not None:
            login.sign_out(request.cookies.get(COOKIE))
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    app.mount("/static", StaticFiles(directory=os.path.join(HERE, "static")), name="static")

    def snapshot() -> dict:
        return dataclasses.asdict(collector.snapshot)

    @app.get("/", response_class=HTMLResponse)
    async def index() -> str:
        with open(os.path.join(HERE, "static", "index.html")) as f:
            return f.read()

    @app.get("/api/overview")
    async def overview() -> dict:
        snap = snapshot()
        return {"at": snap["at"], "brokers": snap["brokers"], "error": snap["error"],
                "topics": {n: {k: t[k] for k in ("messages", "size_bytes", "rate_in", "rate_out", "internal")} | {"partitions": len(t["partitions"])}
                           for n, t in snap["topics"].items()},
                "groups": {g: {"type": x.get("type", "classic"), "state": x["state"], "total_lag": x["total_lag"],
                               "alert": x["alert"],
                               "members": len(x["members"])} for g, x in snap["groups"].items()},
                "pipelines": {n: {"status": p.get("status"), "progress": p.get("progress")}
                              for n, p in snap["pipelines"].items()}}

    @app.get("/api/topics/{name}")
    async def topic(name: str) -> dict:
        t = collector.snapshot.topics.get(name)
        if t is None:
            raise HTTPException(404, f"topic {name!r} does not exist")
        configs = await asyncio.to_thread(collector.topic_configs, name)
        return {"name": name, **t, "configs": configs, "rates": collector.series(f"topic:{name}").get(f"topic:{name}", [])}

    @app.get("/api/topics/{name}/messages")
    async def messages(name: str, partition: int = 0, offset: int | None = Query(None, ge=0),
                       from_time: str | None = None, limit: int = Query(20, ge=1, le=500)) -> list:
        t = collector.snapshot.topics.get(name)
        if t is None:
            raise HTTPException(404, f"topic {name!r} does not exist")
        if not 0 <= partition < len(t["partitions"]):
            raise HTTPException(400, f"partition must be 0..{len(t['partitions']) - 1}")
        from_ms = None
        if from_time:
            try:
                from_ms = int(datetime.fromisoformat(from_time.replace("Z", "+00:00")).timestamp() * 1000)
            except ValueError:
                raise HTTPException(400, "from_time must be an ISO 8601 time") from None
        return await asyncio.to_thread(collector.messages, name, partition, offset, from_ms, limit)

    @app.get("/api/transactions")
    async def transactions() -> dict:
        """Every transactional id; for the open ones, each partition's last stable offset and how many
        records it holds back behind the high watermark (read_committed readers wait for those)."""
        from freshet.client.transactions import describe_transaction, list_transactions

        def gather() -> dict:
            out = {}
            for t in list_transactions(collector.bootstrap):
                entry = {"producer_id": t.producer_id, "state": t.state, "partitions": []}
                if t.state == "Ongoing":
                    d = describe_transaction(t.transactional_id, collector.bootstrap)
                    entry.update(producer_epoch=d.producer_epoch, start_time_ms=d.start_time_ms,
                                 timeout_ms=d.timeout_ms)
                    entry["partitions"] = [{"topic": topic, "partition": p, "last_stable_offset": lso,
                                            "high_watermark": hw, "held_back": hw - lso}
                                           for (topic, p), (lso, hw) in sorted(d.partitions.items())]
                out[t.transactional_id] = entry
            return out

        return await asyncio.to_thread(gather)

    @app.get("/api/applications")
    async def applications() -> dict:
        """Event-sourced applications: events per aggregate type, and each projection's position and lag
        (with its lag history)."""
        out = snapshot()["applications"]
        for name, a in out.items():
            for projection, p in a["projections"].items():
                key = f"projection:{name}/{projection}"
                p["lag_history"] = collector.series(key).get(key, [])
        return out

    @app.get("/api/ingest")
    async def ingest() -> dict:
        """Ingest servers: each endpoint's protocol, address, topic, backpressure policy and counters."""
        return snapshot()["ingest"]

    @app.get("/api/clients")
    async def clients() -> dict:
        """Clients that push their metrics to the broker (KIP-714): request latency, queue time, fetch latency,
        assigned partitions, and the bytes per second each produced and fetched."""
        return snapshot()["clients"]

    @app.get("/api/rules")
    async def rules() -> dict:
        """Stored CEP rules and search queries (what `freshet run cep` and `freshet run watch` match)."""
        return snapshot()["rules"]

    @app.get("/api/groups")
    async def groups() -> dict:
        return snapshot()["groups"]

    @app.get("/api/groups/{group_id}")
    async def group(group_id: str) -> dict:
        g = collector.snapshot.groups.get(group_id)
        if g is None:
            raise HTTPException(404, f"group {group_id!r} does not exist")
        return {"group_id": group_id, **g, "lag_history": collector.series(f"lag:{group_id}").get(f"lag:{group_id}", [])}

    @app.get("/api/pipelines")
    async def pipelines() -> dict:
        out = {}
        for name, p in snapshot()["pipelines"].items():
            out[name] = {**p, "rates": collector.series(f"pipeline:{name}").get(f"pipeline:{name}", [])}
        return out

    @app.post("/api/pipelines/{name}/stop")
    async def stop_pipeline(name: str) -> dict:
        from freshet.client.pipeline_registry import request_stop

        if name not in collector.snapshot.pipelines:
            raise HTTPException(404, f"pipeline {name!r} is not registered")
        await asyncio.to_thread(request_stop, collector.bootstrap, name)
        return {"name": name, "requested": "stop"}

    @app.post("/api/pipelines/{name}/restart")
    async def restart_pipeline(name: str) -> dict:
        import subprocess
        import sys

        record = collector.snapshot.pipelines.get(name)
        if record is None:
            raise HTTPException(404, f"pipeline {name!r} is not registered")
        if record.get("status") == "running":
            raise HTTPException(409, f"pipeline {name!r} is running")
        if not record.get("command") or record.get("host") != __import__("socket").gethostname():
            raise HTTPException(400, f"pipeline {name!r} was not started by freshet run on this host")
        log = open(os.devnull, "wb")
        subprocess.Popen([sys.executable, "-m", "freshet.cli.main", *record["command"], "--bootstrap",
                          collector.bootstrap], stdout=log, stderr=log, start_new_session=True)
        return {"name": name, "requested": "restart"}

    @app.get("/api/events")
    async def events(request: Request) -> StreamingResponse:
        async def stream():
            last = None
            while not await request.is_disconnected():
                snap = collector.snapshot
                if snap.at != last:
                    last = snap.at
                    yield f"data: {json.dumps(await overview())}\n\n"
                await asyncio.sleep(0.5)

        return StreamingResponse(stream(), media_type="text/event-stream")

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> str:
        snap = collector.snapshot
        lines = ["# TYPE freshet_topic_high_watermark gauge", "# TYPE freshet_topic_log_start_offset gauge",
                 "# TYPE freshet_topic_messages_in_per_second gauge", "# TYPE freshet_topic_log_segments gauge",
                 "# TYPE freshet_topic_log_size_bytes gauge", "# TYPE freshet_group_lag gauge",
                 "# TYPE freshet_share_group_backlog gauge", "# TYPE freshet_share_group_in_flight gauge",
                 "# TYPE freshet_share_group_archived counter",
                 "# TYPE freshet_pipeline_input_rows_per_second gauge",
                 "# TYPE freshet_pipeline_late_rows_dropped gauge", "# TYPE freshet_aggregate_events gauge",
                 "# TYPE freshet_projection_lag gauge", "# TYPE freshet_ingest_records gauge",
                 "# TYPE freshet_ingest_buffered gauge"]
        for name, t in sorted(snap.topics.items()):
            lines.append(f'freshet_topic_messages_in_per_second{{topic="{name}"}} {t["rate_in"]}')
            for p in t["partitions"]:
                labels = f'topic="{name}",partition="{p["partition"]}"'
                lines.append(f"freshet_topic_high_watermark{{{labels}}} {p['high_watermark']}")
                lines.append(f"freshet_topic_log_start_offset{{{labels}}} {p['log_start_offset']}")
                if p.get("segments") is not None:
                    lines.append(f"freshet_topic_log_segments{{{labels}}} {p['segments']}")
                    lines.append(f"freshet_topic_log_size_bytes{{{labels}}} {p['size_bytes']}")
        for group_id, g in sorted(snap.groups.items()):
            for p in g["partitions"]:
                labels = f'group="{group_id}",topic="{p["topic"]}",partition="{p["partition"]}"'
                if g.get("type") == "share":  # a queue: what is not done yet, and what is locked to consumers
                    lines.append(f"freshet_share_group_backlog{{{labels}}} {p['backlog']}")
                    lines.append(f"freshet_share_group_in_flight{{{labels}}} {p['acquired']}")
                    lines.append(f"freshet_share_group_archived{{{labels}}} {p['archived']}")
                else:
                    lines.append(f"freshet_group_lag{{{labels}}} {p['lag']}")
        for name, p in sorted(snap.pipelines.items()):
            progress = p.get("progress") or {}
            lines.append(f'freshet_pipeline_input_rows_per_second{{pipeline="{name}"}} '
                         f'{progress.get("input_rows_per_second") or 0}')
            lines.append(f'freshet_pipeline_late_rows_dropped{{pipeline="{name}"}} '
                         f'{progress.get("late_rows_dropped") or 0}')
        for server, info in sorted(snap.ingest.items()):
            for endpoint, e in sorted(info.get("endpoints", {}).items()):
                labels = f'server="{server}",endpoint="{endpoint}"'
                for outcome in ("received", "delivered", "failed", "rejected", "dropped", "malformed"):
                    lines.append(f'freshet_ingest_records{{{labels},outcome="{outcome}"}} {e[outcome]}')
                lines.append(f"freshet_ingest_buffered{{{labels}}} {e['buffered']}")
        for name, a in sorted(snap.applications.items()):
            for type_name, counts in sorted(a["aggregates"].items()):
                lines.append(f'freshet_aggregate_events{{application="{name}",aggregate="{type_name}"}} '
                             f'{counts["events"]}')
            for projection, p in sorted(a["projections"].items()):
                lines.append(f'freshet_projection_lag{{application="{name}",projection="{projection}"}} {p["lag"]}')
        return "\n".join(lines) + "\n"

    return app
