"""``POST /sql``: SQL statements in, JSON lines out (ksqlDB's ``/query-stream`` shape where it fits).

The statements run in what the command starting the dashboard put in ``app.state.sql``: a callable ``(text,
properties) -> (iterator of JSON values, stop)`` (``freshet.sql.http.SqlEndpoint``; the dashboard imports no
Spark). The iterator runs in a thread of its own; a push query's rows are written as they come, and the query is
stopped when the client goes away. A first statement that cannot run is answered 400 with its error; an error
later in a script is the stream's last line.
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

router = APIRouter()
_DONE = object()


class SqlRequest(BaseModel):
    sql: str
    properties: dict[str, str] = {}


def _pump(lines, out: queue.Queue) -> None:
    try:
        for line in lines:
            out.put(line)
    except Exception as e:  # a failure of the SQL side itself: the stream's last line says it
        out.put({"@type": "generic_error", "error_code": 50000, "message": str(e).splitlines()[0] if str(e) else
                 type(e).__name__})
    finally:
        out.put(_DONE)


async def _next(out: queue.Queue, request: Request):
    """The next line, or _DONE; None when the client has gone away."""
    while True:
        try:
            return out.get_nowait()
        except queue.Empty:
            if await request.is_disconnected():
                return None
            await asyncio.sleep(0.05)


@router.post("/sql")
async def run_sql(body: SqlRequest, request: Request):
    endpoint = getattr(request.app.state, "sql", None)
    if endpoint is None:
        raise HTTPException(404, "SQL is not served by this dashboard (it was started without an SQL endpoint)")
    if not body.sql.strip():
        raise HTTPException(400, "no statement: give {\"sql\": \"...\"}")
    lines, stop = endpoint(body.sql, body.properties)
    out: queue.Queue = queue.Queue()
    threading.Thread(target=_pump, args=(lines, out), name="sql-request", daemon=True).start()
    first = await _next(out, request)
    if first is None or first is _DONE:
        stop()
        return JSONResponse([], status_code=200)
    if isinstance(first, dict) and first.get("@type") in ("statement_error", "generic_error"):
        stop()
        return JSONResponse(first, status_code=400 if first["@type"] == "statement_error" else 500)

    async def stream():
        line = first
        try:
            while line is not None and line is not _DONE:
                yield json.dumps(line) + "\n"
                line = await _next(out, request)
        finally:
            stop()

    return StreamingResponse(stream(), media_type="application/x-ndjson")
