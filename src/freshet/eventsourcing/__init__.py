"""Event sourcing on the log: commands, events, projections, snapshots, and forgetting.

Commands go to ``{app}.commands`` partitioned by aggregate; one ``CommandProcessor`` per partition decides
them in order and appends the events, the answers and its input offsets in one Kafka transaction.
``EventStore`` reads histories and states; ``ProjectionRunner`` keeps read models in SQLite or PostgreSQL
exactly once; ``rebuild`` replays one from offset 0 and swaps it in; ``SubjectKeys.forget`` shreds a data
subject's personal fields everywhere at once.
"""

from .aggregate import Aggregate, Application, Rejected
from .commands import Answer, CommandClient, CommandTimeout
from .events import FORGOTTEN, SEALED, Codec, Command, Event, RecordedEvent, SchemaError, personal
from .keys import SubjectKeys
from .processor import CommandProcessor, ProcessorStats
from .projection import Database, Projection, ProjectionRunner, RebuildError, Writer, rebuild, wait_for
from .store import EventStore, Snapshot

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
