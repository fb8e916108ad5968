"""The dashboard's routes, one module per concern; each reads the app's collector through ``Source``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from ..collector import Collector


def collector_of(request: Request) -> Collector:
    return request.app.state.collector


Source = Annotated[Collector, Depends(collector_of)]


def one(mapping: dict, key: str, missing: str) -> dict:
    """``mapping[key]`` of the collector's snapshot; a 404 saying ``missing`` when there is none."""
    found = mapping.get(key)
    if found is None:
        raise HTTPException(404, missing)
    return found


def history(collector: Collector, key: str) -> list:
    """The chart samples of one series (``collector.series`` matches by prefix; this takes the one key)."""
    return collector.series(key).get(key, [])
