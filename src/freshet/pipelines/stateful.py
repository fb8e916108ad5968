"""Python stateful processing, the way every Freshet pipeline uses it: one step function per key that
works on a stream (``applyInPandasWithState``, state in the RocksDB state store and the checkpoint,
behind a watermark with event-time timeouts) and on a static DataFrame (``applyInPandas``, each key
starting from empty state), so a pipeline is testable without a stream.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.streaming.state import GroupStateTimeout

DEFAULT_LATENESS = "2 minutes"  # the watermark delay of every pipeline unless told otherwise


class _FreshState:
    """Stands in for GroupState when a static DataFrame is processed in one go (no watermark, no timeout)."""

    exists = False
    get = None
    hasTimedOut = False

    def update(self, value) -> None:
        self.get, self.exists = value, True

    def remove(self) -> None:
        self.get, self.exists = None, False

    def getCurrentWatermarkMs(self) -> int:
        return -(2**62)

    def setTimeoutTimestamp(self, _ms: int) -> None:
        pass


def epoch_ms(series: pd.Series) -> pd.Series:
    """Timestamps (as pandas hands them to a step) as milliseconds since the epoch."""
    return series.astype("datetime64[us]").astype("int64") // 1000


def stateful(events: DataFrame, key: str, step, output: str, state_schema: str,
             lateness: str | None = None) -> DataFrame:
    """Streaming: applyInPandasWithState; with ``lateness``, behind a watermark on ``event_time`` with
    event-time timeouts (events later than it are dropped and counted). Static: applyInPandas with an
    empty state per key, the same step."""
    if events.isStreaming:
        timeout = GroupStateTimeout.NoTimeout
        if lateness is not None:
            events, timeout = events.withWatermark("event_time", lateness), GroupStateTimeout.EventTimeTimeout
        return events.groupBy(key).applyInPandasWithState(step, output, state_schema, "append", timeout)
    grouped = events.groupBy(key)

    def once(key_value: tuple, pdf: pd.DataFrame) -> pd.DataFrame:
        frames = list(step(key_value, iter([pdf]), _FreshState()))
        return pd.concat(frames) if frames else pd.DataFrame(columns=[c.split()[0] for c in output.split(", ")])

    return grouped.applyInPandas(once, output)
