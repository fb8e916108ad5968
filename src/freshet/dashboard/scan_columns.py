"""The search's fast path: a scan's windows read by the columnar reader (``client/columnar.py``: Fetch requests
decoded in C straight into Arrow buffers, no Python object per record) and filtered with Arrow's compute
kernels; only the records that pass become Python objects (``Row``, with the accessors of a confluent-kafka
Message that the rest of the search uses).

The key and value-substring filters run in Arrow over the whole batch. A JSON path that needs a string
(``$.user.id == "u1"``, ``$.items[?(@.sku == 'x')]``: ``browse.required_text``) first keeps the values that
hold the string as JSON writes it, or hold a backslash (an escape could spell it otherwise), so only those are
parsed. Headers and every other JSON path are judged in
Python on the records the Arrow filters let through. Two readers share a scan's partitions, each on a thread of
its own, so that one's fetch is served while the other's batch is decoded (``read_windows``).

It serves the plaintext clusters the columnar reader covers, where pyarrow is installed (the ``spark`` extra);
``reader_options`` says None otherwise and the search reads through librdkafka.
"""

from __future__ import annotations

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
        mask = both(containing(batch.column("value"), filters.value))
    if filters.required is not None:  # a JSON path needing a string: parse only the values that hold it
        values = batch.column("value")
        mask = both(pc.or_(containing(values, filters.required), containing(values, b"\\")))
    elif getattr(filters, "number", None) is not None:  # a path compared with a number: a scan, not a parse
        values = batch.column("value")
        mask = both(pc.or_(holding_number(values, filters.number), containing(values, b"\\")))
    elif getattr(filters, "either", None) is not None:  # an ||: values holding what one of its sides needs
        values = batch.column("value")
        found = containing(values, b"\\")
        for need in filters.either:
            found = pc.or_(found, containing(values, need) if isinstance(need, bytes) else holding_number(values, need))
        mask = both(found)
    if mask is not None:
        batch = batch.filter(pc.fill_null(mask, False))
    if filters.json_path is not None and batch.num_rows:
        kept = [i for i, v in enumerate(batch.column("value").to_pylist()) if filters._json_match(v)]
        batch = batch.take(pa.array(kept, pa.int64()))
    found = rows(batch)
    if filters.header is not None:
        found = [m for m in found if filters.header_match(m)]
    return found


def _libc_search():
    """glibc's (or the platform C library's) memmem, for searching Arrow's buffers where they lie; None without."""
    import ctypes

    try:
        memmem = ctypes.CDLL(None).memmem
    except (OSError, AttributeError):
        return None
    memmem.restype = ctypes.c_void_p
    memmem.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    return memmem


_memmem = _libc_search()


def containing(array, needle: bytes, most: int = 1000):
    """A boolean Arrow array: which values of a binary ``array`` hold ``needle``. memmem over the array's data
    buffer where it lies (no copy; ~15 GB/s, Arrow's match_substring kernel does ~0.3), each hit placed in its
    value by the offsets and the search going on from that value's end; Arrow's kernel when more than ``most``
    values hold it (a common needle: a call per value would cost more) or where there is no memmem."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(array)
    _, offsets_buffer, data = array.buffers()
    if _memmem is None:
        return pc.fill_null(pc.match_substring(array, needle.decode()), False)
    hit = np.zeros(n, dtype=bool)
    if n == 0 or data is None:
        return pa.array(hit)
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=array.offset + n + 1)[array.offset:]
    base, end = data.address + int(offsets[0]), data.address + int(offsets[-1])
    ends = offsets[1:].astype(np.int64) + data.address  # each value's end, as an address
    at, found, width = base, 0, len(needle)
    while at < end:
        where = _memmem(at, end - at, needle, width)
        if where is None:
            break
        i = int(np.searchsorted(ends, where, side="right"))  # the value whose bytes hold that address
        if where + width <= ends[i]:
            if found == most:
                return pc.fill_null(pc.match_substring(array, needle.decode()), False)
            hit[i], found = True, found + 1
            at = int(ends[i])
        else:
            at = where + 1
    return pa.array(hit)


def holding_number(array, need):
    """A boolean Arrow array: which values of a binary ``array`` hold ``need``'s member written with a number that
    satisfies it (``json_paths.NumberNeed``), found by one scan over the array's data buffer where it lies. Where the
    number's digits can tell (``NumberNeed.candidates``), Arrow's regular-expression kernel (RE2, in C++) first looks
    for values whose digits may satisfy it: a batch with none (a selective search's usual batch) ends there."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(array)
    _, offsets_buffer, data = array.buffers()
    hit = np.zeros(n, dtype=bool)
    if n == 0 or data is None:
        return pa.array(hit)
    if need.candidates is not None and not pc.any(pc.match_substring_regex(array, need.candidates)).as_py():
        return pa.array(hit)
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=array.offset + n + 1)[array.offset:]
    first = int(offsets[0])
    spots = need.spots(memoryview(data)[first:int(offsets[-1])])
    if spots:
        hit[np.searchsorted(offsets[1:] - first, np.array(spots), side="right")] = True
    return pa.array(hit)


READERS = 2  # readers at once, each over its share of the partitions: one's fetch is served while another's
# batch is decoded and filtered (the reader decodes each answer before it asks again)


def read_windows(bootstrap: str, options: dict, topic: str, windows: dict[int, tuple[int, int]], on_batch,
                 stop: threading.Event | None, cancelled, readers: int | None = None) -> None:
    """Each partition's [a, b) in Arrow batches of one partition each, in offset order per partition, to
    ``on_batch(partition, batch)`` (on this thread); ``stop`` set: raises ``cancelled()`` before the next batch.
    The partitions are shared among up to ``readers`` columnar readers, each on a thread of its own."""
    import queue

    wanted = [ReadRange(topic, p, a, b) for p, (a, b) in sorted(windows.items()) if a < b]
    if not wanted:
        return
    readers = readers or READERS
    shares = [wanted[i::readers] for i in range(min(readers, len(wanted)))]
    found: queue.Queue = queue.Queue(maxsize=4 * len(shares))
    done = object()
    abort = threading.Event()

    def put(item) -> bool:
        while not abort.is_set():
            try:
                found.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read(share: list[ReadRange]) -> None:
        try:
            batches = RangeReader(bootstrap, share, schema(), options=options, fail_on_data_loss=False).batches()
            try:
                for batch in batches:
                    if not put(batch):
                        return
            finally:
                batches.close()
        except (ReadError, ColumnarUnavailable) as exc:
            put(ReadFailed(str(exc)))
        except BaseException as exc:  # noqa: BLE001 (handed to the caller's thread, raised there)
            put(exc)
        finally:
            put(done)

    threads = [threading.Thread(target=read, args=(share,), daemon=True, name="console-search-read")
               for share in shares]
    for t in threads:
        t.start()
    try:
        running = len(threads)
        while running:
            item = found.get()
            if item is done:
                running -= 1
                continue
            if isinstance(item, BaseException):
                raise item
            if stop is not None and stop.is_set():
                raise cancelled()
            on_batch(item.column("partition")[0].as_py(), item)
    finally:
        abort.set()
        for t in threads:
            t.join()
