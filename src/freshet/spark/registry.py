"""The Spark side of the pipeline registry (``freshet.client.pipeline_registry``): a streaming query
listener that announces each query's status and progress and obeys stop requests."""

from __future__ import annotations

import json
import socket
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql.streaming import StreamingQueryListener

from freshet.client import consumer_config, producer_config
from freshet.client.offsets import watermark_offsets
from freshet.client.pipeline_registry import CONTROL_TOPIC, PIPELINES_TOPIC, ensure_topics

_READABLE = [("PythonMicroBatchStream", "freshet source"), ("ConsoleTable", "console sink"),
             ("ForeachBatchSink", "foreachBatch sink"), ("FileSink", "parquet sink"), ("FileStreamSource", "file source"),
             ("PythonStreamingSink", "freshet sink"), ("PythonDataSourceStreamingWrite", "freshet sink")]


def _readable(description: str) -> str:
    for needle, name in _READABLE:
        if needle in description:
            return name
    return description.split("@")[0].rsplit(".", 1)[-1]


def dataflow(query) -> list[str]:
    """source -> operators -> sink, read from the query's last progress."""
    progress = query.lastProgress or {}
    nodes = [_readable(s.get("description", "source")) for s in progress.get("sources", [])]
    nodes += [op.get("operatorName", "stateful") for op in progress.get("stateOperators", [])]
    sink = progress.get("sink", {}).get("description")
    if sink:
        nodes.append(_readable(sink))
    return nodes


class PipelineReporter(StreamingQueryListener):
    """Publishes each progress report of the named queries; stops a query when asked to."""

    def __init__(self, bootstrap: str, spark, command: list[str] | None = None, engine: str | None = None,
                 spark_ui: str | None = None) -> None:
        """``engine``: where the queries run (local, spark://..., sc://...); ``spark_ui``: the application's
        Spark UI, which the dashboard links to."""
        ensure_topics(bootstrap)
        self.command = command  # freshet CLI arguments that start this pipeline again (for restart)
        self.engine = engine
        self.spark_ui = spark_ui
        self.bootstrap = bootstrap
        self.spark = spark
        self.producer = Producer(producer_config(bootstrap, {"log_level": 0}))
        self.host = socket.gethostname()
        self._names: dict[str, str] = {}
        self._dropped: dict[str, int] = {}
        self._ended: set[str] = set()  # stopped or failed: a progress event delivered late must not revive it
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch_control, daemon=True)
        self._watcher.start()

    def publish(self, name: str, status: str, progress: dict | None = None, dataflow_nodes=None) -> None:
        if status == "running" and (name in self._ended or self._stop.is_set()):
            return
        if status != "running":
            self._ended.add(name)
        value = {"name": name, "status": status, "host": self.host, "updated_ms": int(time.time() * 1000),
                 "progress": progress or {}, "dataflow": dataflow_nodes or [], "command": self.command,
                 "engine": self.engine, "spark_ui": self.spark_ui}
        self.producer.produce(PIPELINES_TOPIC, json.dumps(value).encode(), name.encode())
        self.producer.poll(0)

    def onQueryStarted(self, event) -> None:
        if event.name:
            self._names[str(event.id)] = event.name
            self._ended.discard(event.name)
            self.publish(event.name, "running")

    def onQueryProgress(self, event) -> None:
        self.report_progress(json.loads(event.progress.json))

    def report_progress(self, p: dict) -> None:
        """Publish one progress report (Spark's StreamingQueryProgress as a dict): from the listener, or polled
        from ``query.lastProgress`` where no listener runs (a Spark Connect client, see ``freshet run``)."""
        if not p or not p.get("name"):
            return
        query = next((q for q in self.spark.streams.active if q.name == p["name"]), None)
        dropped = self._dropped.get(p["name"], 0) + sum(
            op.get("numRowsDroppedByWatermark", 0) for op in p.get("stateOperators", []))
        self._dropped[p["name"]] = dropped  # over the query's life, not one batch
        summary = {
            "batch_id": p.get("batchId"), "input_rows_per_second": p.get("inputRowsPerSecond"),
            "processed_rows_per_second": p.get("processedRowsPerSecond"), "num_input_rows": p.get("numInputRows"),
            "batch_duration_ms": p.get("durationMs", {}).get("triggerExecution"),
            "watermark": p.get("eventTime", {}).get("watermark"),
            "state_rows": sum(op.get("numRowsTotal", 0) for op in p.get("stateOperators", [])),
            "late_rows_dropped": dropped,
        }
        self.publish(p["name"], "running", summary, dataflow(query) if query else [])

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        name = self._names.get(str(event.id))
        if name:
            self.publish(name, "stopped")
        self.producer.flush(5)

    def _watch_control(self) -> None:
        consumer = Consumer(consumer_config(self.bootstrap, overrides={"log_level": 0}))
        end = watermark_offsets(consumer, TopicPartition(CONTROL_TOPIC, 0), 10)[1]
        consumer.assign([TopicPartition(CONTROL_TOPIC, 0, end)])  # only requests made from now on
        while not self._stop.is_set():
            for m in consumer.consume(10, 0.5):
                if m.error() is not None or m.value() is None:
                    continue
                request = json.loads(m.value())
                for q in self.spark.streams.active:
                    if q.name == request.get("name") and request.get("action") == "stop":
                        from .session import stop_gracefully

                        stop_gracefully([q])
                        self.publish(q.name, "stopped")
                        self.producer.flush(5)
        consumer.close()

    def close(self) -> None:
        self._stop.set()
        self.producer.flush(5)
