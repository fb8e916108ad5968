"""What a handler is given and what it returns.

A handler is a function ``(ctx, request) -> response``: ``request`` is the kio dataclass of the API
version the client sent (older versions lack newer fields: handlers read those with ``getattr`` and
a default), and the response is a dict that ``protocol.build`` turns into that version's response,
None (no response, as for acks=0), or an awaitable of either (long-polls, acks=all).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from .protocol import RequestHeader

if TYPE_CHECKING:
    from .server import Broker

Request: TypeAlias = Any  # a kio request dataclass, of the version in ``ctx.header.api_version``
Response: TypeAlias = dict | None | Awaitable[dict | None]


@dataclass
class RequestContext:
    broker: "Broker"
    header: RequestHeader
    peer_host: str = ""
    throttle_ms: int = 0  # set by a handler over quota: the connection is muted this long

    @property
    def version(self) -> int:
        return self.header.api_version


Handler = Callable[[RequestContext, Request], Response]
