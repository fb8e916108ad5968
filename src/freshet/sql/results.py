"""What a statement answers: a message, a table of rows, or a push query's rows as they change."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass
class Message:
    """A statement that did something (CREATE, DROP, SET...) and says what."""

    text: str


@dataclass
class Rows:
    """A finished answer: SHOW, DESCRIBE, EXPLAIN, a batch SELECT, a pull query."""

    columns: list[str]
    rows: list[tuple]


@dataclass
class Push:
    """A push query's rows as they change (``SELECT ... EMIT CHANGES``): iterate ``rows``; ``stop()`` ends the
    query (Ctrl-C, a client gone); iteration ends by itself at the query's LIMIT or UNTIL."""

    columns: list[str]
    rows: Iterator[tuple]
    stop: Callable[[], None]
    query_id: str = ""
    info: dict = field(default_factory=dict)
