"""``POST /sql``: SQL statements in, JSON lines out (ksqlDB's ``/query-stream`` shape where it fits).

The statements run in what the command starting the dashboard put in ``app.state.sql``: a callable ``(text,
properties) -> (iterator of JSON values, stop)`` (``freshet.sql.http.SqlEndpoint``; the dashboard imports no
Spark). The iterator runs in a thread of its own; a push query's rows are written as they come, and the query is
stopped when the client goes away. A first statement that cannot run is answered 400 with its error; an error
later in a script is the stream's last line.
"""

from __future__ import annotations

import asyncio
import email.message
import json
import threading
from concurrent.futures import ThreadPoolExecutor

from fastapi import APIRouter, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError

router = APIRouter()
_DONE = object()
# the reads of a table's copy for pull queries (off the event loop: the copy may be PostgreSQL over a network), in
# a pool of the route's own handed work by run_in_executor: anyio's run_in_threadpool (its capacity limiter, run
# vars and cancel scopes) was the largest share of the route's own CPU in a profile (py-spy) of pull queries
_READS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="sql-pull")


class SqlRequest(BaseModel):
    sql: str
    properties: dict[str, str] = {}


async def _body(request: Request) -> SqlRequest:
    """The request's body, as FastAPI reads it against the model (a JSON content type, else no JSON: a browser's
    form cannot post SQL across sites), its refusals its 422s; the common case, ``{"sql": "...", "properties":
    {...}}`` of strings, without the model's validation (FastAPI's dependency solving and pydantic's checks,
    the next share of a pull query's CPU in the route)."""
    raw = await request.body()
    data = raw or None
    if raw and _json_type(request.headers.get("content-type")):
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as e:
            raise RequestValidationError([{"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error",
                                           "input": {}, "ctx": {"error": e.msg}}], body=e.doc) from None
        if isinstance(data, dict) and isinstance(data.get("sql"), str):
            properties = data.get("properties", {})
            if isinstance(properties, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in properties.items()):
                return SqlRequest.model_construct(sql=data["sql"], properties=properties)
    if data is None:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    try:
        return SqlRequest.model_validate(data, from_attributes=True)  # as FastAPI validates a body
    except ValidationError as e:
        errors = [dict(error, loc=("body", *error["loc"])) for error in e.errors(include_url=False)]
        raise RequestValidationError(errors, body=data) from None


def _json_type(content_type: str | None) -> bool:
    """Whether FastAPI reads a body of this content type as JSON (application/json, application/...+json)."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


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
async def run_sql(request: Request):
    endpoint = getattr(request.app.state, "sql", None)
    if endpoint is None:
        raise HTTPException(404, "SQL is not served by this dashboard (it was started without an SQL endpoint)")
    body = await _body(request)
    if not body.sql.strip():
        raise HTTPException(400, "no statement: give {\"sql\": \"...\"}")
    answer_now = getattr(endpoint, "answer_now", None)  # a pull query: one read of a table's copy, no thread
    # of its own: the read goes to the route's read threads, not the event loop (the copy may be PostgreSQL)
    answer = (await asyncio.get_running_loop().run_in_executor(_READS, answer_now, body.sql, body.properties)
              if answer_now is not None else None)
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
