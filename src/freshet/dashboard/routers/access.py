"""Who may look: a token (scripts, or a dashboard bound beyond loopback) or a browser session signed in with a
Kafka user (``login.py``); a request with the token needs no session."""

from __future__ import annotations

import asyncio
import hmac
from urllib.parse import parse_qs

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from ..login import COOKIE, LOGIN_PAGE

router = APIRouter()
OPEN_PATHS = ("/login", "/logout")


async def require_access(request: Request, call_next):
    """HTTP middleware: ``app.state.token`` and ``app.state.login`` say what a request must carry."""
    token, login = request.app.state.token, request.app.state.login
    given = request.query_params.get("token") or request.headers.get("authorization", "").removeprefix("Bearer ")
    has_token = bool(token) and hmac.compare_digest(given or "", token)
    if login is not None:
        if request.url.path in OPEN_PATHS or has_token or login.user_of(request.cookies.get(COOKIE)):
            return await call_next(request)
        if request.url.path == "/":
            return RedirectResponse("/login", status_code=303)
        return JSONResponse({"error": "sign in first (/login), or give the token"}, status_code=401)
    if token and not has_token:
        return JSONResponse({"error": "a token is required (?token=... or Authorization: Bearer ...)"},
                            status_code=401)
    return await call_next(request)


@router.get("/login", response_class=HTMLResponse)
async def login_page() -> str:
    return LOGIN_PAGE.replace("{error}", "")


@router.post("/login")
async def sign_in(request: Request):
    login = request.app.state.login
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


@router.post("/logout")
async def sign_out(request: Request):
    login = request.app.state.login
    if login is not None:
        login.sign_out(request.cookies.get(COOKIE))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE)
    return response
