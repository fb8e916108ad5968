"""The search's fast path: a scan's windows read by the columnar reader (``client/columnar.py``: Fetch requests
decoded in C straight into Arrow buffers, no Python object per record) and filtered with Arrow's compute
kernels; only the records that pass become Python objects (``Row``, with the accessors of a confluent-kafka
Message that the rest of the search uses).

The key and value-substring filters run in Arrow over the whole batch. A JSON path comparing with a string
(``$.user.id == "u1"``) first keeps the values that hold the string as JSON writes it, or hold a backslash (an
escape could spell it otherwise), so only those are parsed. Headers and every other JSON path are judged in
Python on the records the Arrow filters let through.

It serves the plaintext clusters the columnar reader covers, where pyarrow is installed (the ``spark`` extra);
``reader_options`` says None otherwise and the search reads through librdkafka.
"""

from __future__ import annotations

import json
import threading

from freshet.client import consumer_config
from freshet.client.columnar import ColumnarUnavailable, RangeReader, ReadError, ReadRange, covers

TIMESTAMP_TYPES = {0: 1, 1: 2}  # the decoder's timestamp type -> confluent-kafka's (create, log-append)


class ReadFailed(RuntimeError):
    """The cluster would not serve a range (the message says why)."""


def reader_options(bootstrap: str | None) -> tuple[str, dict] | None:
    """(bootstrap servers, the columnar reader's options) when it can serve this cluster and pyarrow is here."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return None
    config = consumer_config(bootstrap)
    options = {"isolation.level": "read_uncommitted", "fetch.wait.max.ms": 5,
               "security.protocol": config.get("security.protocol", "plaintext")}
    return (config["bootstrap.servers"], options) if covers(options) is None else None


def schema():
    import pyarrow as pa

    return pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                      ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.int64()),
                      ("timestampType", pa.int32()),
                      ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))])


class Row:
    """One record the filters kept, answering as a confluent-kafka Message does."""

    __slots__ = ("_partition", "_offset", "_timestamp", "_key", "_value", "_headers")

    def __init__(self, partition: int, offset: int, timestamp: tuple[int, int], key, value, headers) -> None:
        self._partition, self._offset, self._timestamp = partition, offset, timestamp
        self._key, self._value, self._headers = key, value, headers

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def key(self):
        return self._key

    def value(self):
        return self._value

    def headers(self):
        return self._headers


def rows(batch) -> list[Row]:
    columns = batch.to_pydict()
    return [Row(p, o, (TIMESTAMP_TYPES.get(tt, 0), ts // 1000), k, v,
                [(h["key"], h["value"]) for h in hs] if hs else None)
            for k, v, p, o, ts, tt, hs in zip(columns["key"], columns["value"], columns["partition"],
                                               columns["offset"], columns["timestamp"], columns["timestampType"],
                                               columns["headers"])]


def select(filters, batch) -> list[Row]:
    """The records of an Arrow batch matching every filter of ``filters`` (browse.Filters), as Rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    mask = None

    def both(more):
        return more if mask is None else pc.and_(mask, more)

    if filters.key is not None:
        mask = both(pc.equal(batch.column("key"), pa.scalar(filters.key, pa.binary())))
    if filters.value is not None:
        mask = both(pc.match_substring(batch.column("value"), filters.value.decode()))
    if filters.compare is not None and filters.compare[0] == "==" and isinstance(filters.compare[1], str):
        written = json.dumps(filters.compare[1], ensure_ascii=False)
        values = batch.column("value")
        mask = both(pc.or_(pc.match_substring(values, written), pc.match_substring(values, "\\")))
    if mask is not None:
        batch = batch.filter(pc.fill_null(mask, False))
    if filters.json_path is not None and batch.num_rows:
        kept = [i for i, v in enumerate(batch.column("value").to_pylist()) if filters._json_match(v)]
        batch = batch.take(pa.array(kept, pa.int64()))
    found = rows(batch)
    if filters.header is not None:
        found = [m for m in found if filters.header_match(m)]
    return found


def read_windows(bootstrap: str, options: dict, topic: str, windows: dict[int, tuple[int, int]], on_batch,
                 stop: threading.Event | None, cancelled) -> None:
    """Each partition's [a, b) in Arrow batches of one partition each, in offset order per partition, to
    ``on_batch(partition, batch)``; ``stop`` set: raises ``cancelled()`` before the next batch."""
    wanted = [ReadRange(topic, p, a, b) for p, (a, b) in windows.items() if a < b]
    if not wanted:
        return
    reader = RangeReader(bootstrap, wanted, schema(), options=options, fail_on_data_loss=False)
    batches = reader.batches()
    try:
        for batch in batches:
            if stop is not None and stop.is_set():
                raise cancelled()
            on_batch(batch.column("partition")[0].as_py(), batch)
    except (ReadError, ColumnarUnavailable) as exc:
        raise ReadFailed(str(exc)) from None
    finally:
        batches.close()
