"""Event sourcing on the log: commands, events, projections, snapshots, and forgetting.

Commands go to ``{app}.commands`` partitioned by aggregate; one ``CommandProcessor`` per partition decides
them in order and appends the events, the answers and its input offsets in one Kafka transaction.
``EventStore`` reads histories and states; ``ProjectionRunner`` keeps read models in SQLite or PostgreSQL
exactly once; ``rebuild`` replays one from offset 0 and swaps it in; ``SubjectKeys.forget`` shreds a data
subject's personal fields everywhere at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Each name is imported from its module when first used: a command-line client that sends one command does
# not load the projections (and through them the columnar reader) or the processor.
_WHERE = {
    "Aggregate": "aggregate", "Application": "aggregate", "Rejected": "aggregate",
    "Answer": "commands", "CommandClient": "commands", "CommandTimeout": "commands",
    "FORGOTTEN": "events", "SEALED": "events", "Codec": "events", "Command": "events", "Event": "events",
    "RecordedEvent": "events", "SchemaError": "events", "personal": "events",
    "SubjectKeys": "keys",
    "CommandProcessor": "processor", "ProcessorStats": "processor",
    "Database": "projection", "Projection": "projection", "ProjectionRunner": "projection",
    "RebuildError": "projection", "Writer": "projection", "rebuild": "projection", "wait_for": "projection",
    "EventStore": "store", "Snapshot": "store",
}

if TYPE_CHECKING:
    from .aggregate import Aggregate, Application, Rejected
    from .commands import Answer, CommandClient, CommandTimeout
    from .events import FORGOTTEN, SEALED, Codec, Command, Event, RecordedEvent, SchemaError, personal
    from .keys import SubjectKeys
    from .processor import CommandProcessor, ProcessorStats
    from .projection import Database, Projection, ProjectionRunner, RebuildError, Writer, rebuild, wait_for
    from .store import EventStore, Snapshot


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "FORGOTTEN",
    "Aggregate",
    "Answer",
    "Application",
    "Codec",
    "Command",
    "CommandClient",
    "CommandProcessor",
    "CommandTimeout",
    "Database",
    "Event",
    "EventStore",
    "ProcessorStats",
    "Projection",
    "ProjectionRunner",
    "RebuildError",
    "RecordedEvent",
    "Rejected",
    "SEALED",
    "SchemaError",
    "Snapshot",
    "SubjectKeys",
    "Writer",
    "personal",
    "rebuild",
    "wait_for",
]
