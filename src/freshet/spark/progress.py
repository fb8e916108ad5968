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

    Spark delivers progress to listeners asynchronously: right after a query's batch (or the whole
    query) has ended, the counter may not have heard of it yet. ``settle(query)`` waits until it has.
    """

    def __init__(self) -> None:
        self._dropped: dict[str, int] = {}
        self._last: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._heard = threading.Condition(self._lock)

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
            self._heard.notify_all()

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass

    def settle(self, query, timeout: float = 60.0) -> bool:
        """Wait until the counter has heard of ``query``'s last reported batch (False if it has not
        within ``timeout`` seconds)."""
        last = query.lastProgress
        if last is None:
            return True
        key, batch_id = str(query.id), last["batchId"]
        with self._heard:
            return self._heard.wait_for(lambda: self._last.get(key, {}).get("batch_id", -1) >= batch_id, timeout)

    def dropped(self, query_id) -> int:
        with self._lock:
            return self._dropped.get(str(query_id), 0)

    def last(self, query_id) -> dict:
        with self._lock:
            return dict(self._last.get(str(query_id), {}))

