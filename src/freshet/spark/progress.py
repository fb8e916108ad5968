"""What a streaming query reports about itself: late rows dropped by the watermark, rates, watermark."""

from __future__ import annotations

import threading

from pyspark.sql.streaming import StreamingQueryListener


class LateRowsCounter(StreamingQueryListener):
    """Adds up ``numRowsDroppedByWatermark`` of every stateful operator, per query id, over the
    query's whole life (``recentProgress`` only keeps the last 100 batches).

        counter = LateRowsCounter.install(spark)
        ...
        counter.dropped(query.id)
    """

    def __init__(self) -> None:
        self._dropped: dict[str, int] = {}
        self._last: dict[str, dict] = {}
        self._lock = threading.Lock()

    @classmethod
    def install(cls, spark) -> "LateRowsCounter":
        counter = cls()
        spark.streams.addListener(counter)
        return counter

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        progress = event.progress
        dropped = sum(op.numRowsDroppedByWatermark for op in progress.stateOperators)
        with self._lock:
            key = str(progress.id)
            self._dropped[key] = self._dropped.get(key, 0) + dropped
            self._last[key] = {
                "batch_id": progress.batchId,
                "input_rows_per_second": progress.inputRowsPerSecond,
                "processed_rows_per_second": progress.processedRowsPerSecond,
                "num_input_rows": progress.numInputRows,
                "watermark": (progress.eventTime or {}).get("watermark"),
                "state_rows": sum(op.numRowsTotal for op in progress.stateOperators),
            }

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass

    def dropped(self, query_id) -> int:
        with self._lock:
            return self._dropped.get(str(query_id), 0)

    def last(self, query_id) -> dict:
        with self._lock:
            return dict(self._last.get(str(query_id), {}))

