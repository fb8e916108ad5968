"""Windows Spark's ``window()`` does not give, built on Spark's Python stateful processing
(``applyInPandasWithState``; state lives in the RocksDB state store and the checkpoint, so a
restarted query carries on with it).

- ``count_windows``: per key, one result every ``n`` events (a tumbling window measured in
  events, not time). Events are taken in event-time order within each microbatch.
- ``sliding_event_windows``: for every event, the events of the same key within the ``span``
  before it (an event-based sliding window: it moves with each event, not on a clock).
"""

from __future__ import annotations

from typing import Iterator

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.streaming.state import GroupStateTimeout

COUNT_OUTPUT = ("client_ip string, window_index long, first_event_time timestamp, last_event_time timestamp, "
                "events long, bytes long")
COUNT_STATE = "window_index long, events long, bytes long, first_ms long, last_ms long"

SLIDING_OUTPUT = "client_ip string, event_time timestamp, events_in_span long, bytes_in_span long"
SLIDING_STATE = "times array<long>, sizes array<long>"


def _ms(series: pd.Series) -> pd.Series:
    return series.astype("datetime64[us]").astype("int64") // 1000


class _FreshState:
    """Stands in for GroupState when a static DataFrame is processed in one go."""

    exists = False
    get = None

    def update(self, value) -> None:
        self.get, self.exists = value, True


def _stateful(events: DataFrame, key: str, step, output: str, state_schema: str) -> DataFrame:
    """Streaming: applyInPandasWithState. Static: applyInPandas with an empty state per key, the same step."""
    grouped = events.groupBy(key)
    if events.isStreaming:
        return grouped.applyInPandasWithState(step, output, state_schema, "append", GroupStateTimeout.NoTimeout)

    def once(key_value: tuple, pdf: pd.DataFrame) -> pd.DataFrame:
        frames = list(step(key_value, iter([pdf]), _FreshState()))
        return pd.concat(frames) if frames else pd.DataFrame(columns=[c.split()[0] for c in output.split(", ")])

    return grouped.applyInPandas(once, output)


def count_windows(events: DataFrame, n: int = 100, key: str = "client_ip") -> DataFrame:
    """Per ``key``, a row for each complete run of ``n`` events: when it began and ended, bytes."""
    if n < 1:
        raise ValueError("a count window holds at least one event")

    def step(key_value: tuple, batches: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        index, count, total, first, last = state.get if state.exists else (0, 0, 0, -1, -1)
        frames = [b[["event_time", "size"]] for b in batches]
        pdf = pd.concat(frames).sort_values("event_time", kind="stable")
        out = []
        for ms, size in zip(_ms(pdf["event_time"]).tolist(), pdf["size"].fillna(0).astype("int64").tolist()):
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

    return _stateful(events, key, step, COUNT_OUTPUT, COUNT_STATE)


def sliding_event_windows(events: DataFrame, span_seconds: int = 600, key: str = "client_ip") -> DataFrame:
    """For each event, how many events (and bytes) its key had in the ``span_seconds`` up to it."""
    span_ms = span_seconds * 1000

    def step(key_value: tuple, batches: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        times, sizes = (list(state.get[0]), list(state.get[1])) if state.exists else ([], [])
        pdf = pd.concat([b[["event_time", "size"]] for b in batches]).sort_values("event_time", kind="stable")
        out = []
        for ms, size in zip(_ms(pdf["event_time"]).tolist(), pdf["size"].fillna(0).astype("int64").tolist()):
            times.append(ms)
            sizes.append(size)
            in_span = [(t, s) for t, s in zip(times, sizes) if ms - span_ms <= t <= ms]
            out.append((key_value[0], ms, len(in_span), sum(s for _, s in in_span)))
        newest = max(times) if times else 0
        kept = [(t, s) for t, s in zip(times, sizes) if t >= newest - span_ms]
        state.update(([t for t, _ in kept], [s for _, s in kept]))
        if out:
            df = pd.DataFrame(out, columns=["client_ip", "ms", "events_in_span", "bytes_in_span"])
            df["event_time"] = pd.to_datetime(df.pop("ms"), unit="ms")
            yield df[["client_ip", "event_time", "events_in_span", "bytes_in_span"]]

    return _stateful(events, key, step, SLIDING_OUTPUT, SLIDING_STATE)
