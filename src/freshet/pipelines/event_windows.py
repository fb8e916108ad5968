"""Windows Spark's ``window()`` does not give, built on Spark's Python stateful processing
(``applyInPandasWithState``; state lives in the RocksDB state store and the checkpoint, so a
restarted query carries on with it).

- ``count_windows``: per key, one result every ``n`` events (a tumbling window measured in
  events, not time). Events are taken in event-time order within each microbatch.
- ``sliding_event_windows``: for every event, the events of the same key within the ``span``
  before it (an event-based sliding window: it moves with each event, not on a clock). Late
  events are dropped behind a watermark; state is kept only as far back as a window can reach.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame

from .stateful import DEFAULT_LATENESS, epoch_ms, stateful

COUNT_OUTPUT = ("client_ip string, window_index long, first_event_time timestamp, last_event_time timestamp, "
                "events long, bytes long")
COUNT_STATE = "window_index long, events long, bytes long, first_ms long, last_ms long"

SLIDING_OUTPUT = ("client_ip string, event_time timestamp, partition int, offset long, events_in_span long, "
                  "bytes_in_span long")
# int64 arrays, packed (PySpark 4.3's Python worker cannot read an array type in a state schema:
# KeyError 'elementType' in every applyInPandasWithState task)
SLIDING_STATE = "times binary, sizes binary"


def count_windows(events: DataFrame, n: int = 100, key: str = "client_ip") -> DataFrame:
    """Per ``key``, a row for each complete run of ``n`` events: when it began and ended, bytes."""
    if n < 1:
        raise ValueError("a count window holds at least one event")

    def step(key_value: tuple, batches: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        index, count, total, first, last = state.get if state.exists else (0, 0, 0, -1, -1)
        frames = [b[["event_time", "size"]] for b in batches]
        pdf = pd.concat(frames).sort_values("event_time", kind="stable")
        out = []
        for ms, size in zip(epoch_ms(pdf["event_time"]).tolist(), pdf["size"].fillna(0).astype("int64").tolist()):
            if count == 0:
                first = ms
            count += 1
            total += size
            last = ms
            if count == n:
                out.append((key_value[0], index, first, last, count, total))
                index, count, total, first, last = index + 1, 0, 0, -1, -1
        state.update((index, count, total, first, last))
        if out:
            df = pd.DataFrame(out, columns=["client_ip", "window_index", "first_ms", "last_ms", "events", "bytes"])
            df["first_event_time"] = pd.to_datetime(df.pop("first_ms"), unit="ms")
            df["last_event_time"] = pd.to_datetime(df.pop("last_ms"), unit="ms")
            yield df[["client_ip", "window_index", "first_event_time", "last_event_time", "events", "bytes"]]

    return stateful(events, key, step, COUNT_OUTPUT, COUNT_STATE)


def sliding_event_windows(events: DataFrame, span_seconds: int = 600, key: str = "client_ip",
                          lateness: str = DEFAULT_LATENESS) -> DataFrame:
    """For each event, how many events (and bytes) its key had in the ``span_seconds`` up to it.

    Each result row names its event by the record's ``partition`` and ``offset`` (the result's
    primary key: a client may send two requests in the same second of log time). On a stream,
    events more than ``lateness`` behind the watermark are dropped and counted, like the windowed
    pipelines; a key keeps only the events a later one can still reach (those after the watermark
    minus the span), and its state is removed once the watermark has passed its last event's span.
    """
    if span_seconds <= 0:
        raise ValueError("a sliding window spans a positive number of seconds")
    missing = [c for c in ("partition", "offset") if c not in events.columns]
    if missing:
        raise ValueError("sliding windows name each event by its record's partition and offset: parse the "
                         f"source's records with those columns (missing: {', '.join(missing)})")
    span_ms = span_seconds * 1000

    def step(key_value: tuple, batches: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        if state.hasTimedOut:  # the watermark passed the span of the key's last event: nothing can reach it
            state.remove()
            return
        held_t = np.frombuffer(state.get[0], dtype="<i8") if state.exists else np.empty(0, "<i8")  # by time
        held_s = np.frombuffer(state.get[1], dtype="<i8") if state.exists else np.empty(0, "<i8")
        frames = [b[["event_time", "size", "partition", "offset"]] for b in batches]
        pdf = pd.concat(frames) if frames else None
        if pdf is None or pdf.empty:
            return
        pdf = pdf.sort_values(["event_time", "partition", "offset"], kind="stable")
        t = epoch_ms(pdf["event_time"]).to_numpy()
        s = pdf["size"].fillna(0).astype("int64").to_numpy()
        since = t - span_ms
        # events held from earlier batches within [t - span, t] ...
        lo, hi = np.searchsorted(held_t, since, "left"), np.searchsorted(held_t, t, "right")
        held_sums = np.concatenate([[0], np.cumsum(held_s)])
        # ... and this batch's events up to this one (in event-time order) within the span
        first, upto = np.searchsorted(t, since, "left"), np.arange(1, len(t) + 1)
        sums = np.concatenate([[0], np.cumsum(s)])
        out = pd.DataFrame({
            "client_ip": key_value[0],
            "event_time": pdf["event_time"].to_numpy(),
            "partition": pdf["partition"].to_numpy(),
            "offset": pdf["offset"].to_numpy(),
            "events_in_span": (hi - lo) + (upto - first),
            "bytes_in_span": (held_sums[hi] - held_sums[lo]) + (sums[upto] - sums[first]),
        })
        times, sizes = np.concatenate([held_t, t]), np.concatenate([held_s, s])
        order = np.argsort(times, kind="stable")
        times, sizes = times[order], sizes[order]
        keep = times >= state.getCurrentWatermarkMs() - span_ms
        state.update((times[keep].astype("<i8").tobytes(), sizes[keep].astype("<i8").tobytes()))
        state.setTimeoutTimestamp(int(times[-1]) + span_ms)
        yield out

    return stateful(events, key, step, SLIDING_OUTPUT, SLIDING_STATE, lateness)
