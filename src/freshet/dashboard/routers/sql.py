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
import threading

from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel

router = APIRouter()
_DONE = object()


class SqlRequest(BaseModel):
    sql: str
    properties: dict[str, str] = {}


def _pump(lines, out: asyncio.Queue, loop: asyncio.AbstractEventLoop) -> None:
    """The lines into ``out``, each handed to the event loop as it comes (a pull query's answer is there at once,
    not at the loop's next look: polling every 50 ms made a pull query's p50 over HTTP 88 ms)."""
    def put(line) -> None:
        try:
            loop.call_soon_threadsafe(out.put_nowait, line)
        except RuntimeError:  # the loop has closed: no one is reading any more
            pass

    try:
        for line in lines:
            put(line)
    except Exception as e:  # a failure of the SQL side itself: the stream's last line says it
        put({"@type": "generic_error", "error_code": 50000, "message": str(e).splitlines()[0] if str(e) else
             type(e).__name__})
    finally:
        put(_DONE)


async def _next(out: asyncio.Queue, request: Request):
    """The next line, or _DONE; None when the client has gone away."""
    while True:
        try:
            return await asyncio.wait_for(out.get(), 0.5)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                return None


@router.post("/sql")
async def run_sql(body: SqlRequest, request: Request):
    endpoint = getattr(request.app.state, "sql", None)
    if endpoint is None:
        raise HTTPException(404, "SQL is not served by this dashboard (it was started without an SQL endpoint)")
    if not body.sql.strip():
        raise HTTPException(400, "no statement: give {\"sql\": \"...\"}")
    answer_now = getattr(endpoint, "answer_now", None)  # a pull query: one read of a table's copy, no thread
    # of its own: the read goes to the server's worker threads, not the event loop (the copy may be PostgreSQL)
    answer = await run_in_threadpool(answer_now, body.sql, body.properties) if answer_now is not None else None
    if answer is not None:
        return Response("".join(json.dumps(line) + "\n" for line in answer), media_type="application/x-ndjson")
    lines, stop = endpoint(body.sql, body.properties)
    out: asyncio.Queue = asyncio.Queue()
    threading.Thread(target=_pump, args=(lines, out, asyncio.get_running_loop()), name="sql-request",
                     daemon=True).start()
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
