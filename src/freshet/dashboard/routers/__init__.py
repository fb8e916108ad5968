"""The dashboard's routes, one module per concern; each reads the app's collector through ``Source``."""

from __future__ import annotations

from typing import Annotated

from confluent_kafka.admin import AdminClient
from fastapi import Depends, HTTPException, Request

from ..collector import Collector
from ..login import COOKIE


def collector_of(request: Request) -> Collector:
    return request.app.state.collector


Source = Annotated[Collector, Depends(collector_of)]


def credentials_of(request: Request) -> dict | None:
    """The signed-in user's SASL settings when the dashboard has sign-in (``--login``) and the request a session;
    None: the dashboard's own credentials (no sign-in, or a request with the token)."""
    login = request.app.state.login
    return login.credentials(request.cookies.get(COOKIE)) if login is not None else None


def admin_of(request: Request) -> AdminClient:
    """The admin client that changes the cluster for this request: the signed-in user's, else the dashboard's."""
    login = request.app.state.login
    acting = login.admin_for(request.cookies.get(COOKIE)) if login is not None else None
    return acting if acting is not None else request.app.state.collector.admin


Admin = Annotated[AdminClient, Depends(admin_of)]
Credentials = Annotated[dict | None, Depends(credentials_of)]
VISIBLE_TTL_S = 5.0  # how long what a signed-in user may see is kept before it is asked again


def visible_to(request: Request) -> tuple[set[str], set[str]] | None:
    """(topics, groups) the signed-in user may see, asked as them (Metadata names the topics they may DESCRIBE,
    ListGroups the groups), kept ``VISIBLE_TTL_S`` per session; None: no sign-in, or a request with the token (the
    dashboard's own view). Blocking: call it off the event loop."""
    import time

    login = request.app.state.login
    session = request.cookies.get(COOKIE)
    admin = login.admin_for(session) if login is not None else None
    if admin is None:
        return None
    seen = request.app.state.visible
    for gone in [s for s in seen if login.user_of(s) is None]:  # signed out or expired
        seen.pop(gone)
    at, topics, groups = seen.get(session, (0.0, set(), set()))
    if time.monotonic() - at > VISIBLE_TTL_S:
        metadata = admin.list_topics(timeout=10)
        topics = {name for name, t in metadata.topics.items() if t.error is None}
        groups = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
        seen[session] = (time.monotonic(), topics, groups)
    return topics, groups


def one(mapping: dict, key: str, missing: str) -> dict:
    """``mapping[key]`` of the collector's snapshot; a 404 saying ``missing`` when there is none."""
    found = mapping.get(key)
    if found is None:
        raise HTTPException(404, missing)
    return found


def history(collector: Collector, key: str) -> list:
    """The chart samples of one series (``collector.series`` matches by prefix; this takes the one key)."""
    return collector.series(key).get(key, [])


Visible = Annotated[tuple[set[str], set[str]] | None, Depends(visible_to)]  # a sync dependency: FastAPI runs it
# on its thread pool
