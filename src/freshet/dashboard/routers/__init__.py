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


def one(mapping: dict, key: str, missing: str) -> dict:
    """``mapping[key]`` of the collector's snapshot; a 404 saying ``missing`` when there is none."""
    found = mapping.get(key)
    if found is None:
        raise HTTPException(404, missing)
    return found


def history(collector: Collector, key: str) -> list:
    """The chart samples of one series (``collector.series`` matches by prefix; this takes the one key)."""
    return collector.series(key).get(key, [])
