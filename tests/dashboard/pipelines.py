"""Pipelines in the registry without Spark: records as ``freshet.spark.registry.PipelineReporter`` writes them, and a
stand-in for a ``freshet run`` driver where the JVM is not what a test is about."""

from __future__ import annotations

import json
import socket
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from freshet.client import consumer_config
from freshet.client.offsets import watermark_offsets
from freshet.client.pipeline_registry import CONTROL_TOPIC, PIPELINES_TOPIC, ensure_topics


def record(name: str, status: str, command: list[str] | None, progress: dict, host: str = "test") -> bytes:
    """A pipeline's registry record, as ``PipelineReporter.publish`` writes it."""
    return json.dumps({"name": name, "status": status, "host": host, "updated_ms": int(time.time() * 1000),
                       "progress": progress, "dataflow": [], "command": command, "engine": "local",
                       "spark_ui": None}).encode()


def announce(bootstrap: str, name: str, status: str, command: list[str], progress: dict) -> None:
    ensure_topics(bootstrap)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(PIPELINES_TOPIC, record(name, status, command, progress), name.encode())
    producer.flush(10)


class StandInPipeline(threading.Thread):
    """What a ``freshet run`` driver's reporter does for the dashboard, without a JVM: announces the pipeline
    running, on this host with the command that starts it again (what the page's restart runs), with a progress
    report a second; asked to stop on the control topic (requests made after it started), it announces it stopped
    and ends. ``stopped_by_request`` tells which way it ended."""

    def __init__(self, bootstrap: str, name: str, command: list[str]) -> None:
        super().__init__(daemon=True, name=f"stand-in-{name}")
        ensure_topics(bootstrap)
        self.bootstrap, self.pipeline, self.command = bootstrap, name, command
        self.stopped_by_request = False
        self._quit = threading.Event()
        self._control = Consumer(consumer_config(bootstrap, overrides={"log_level": 0}))
        end = watermark_offsets(self._control, TopicPartition(CONTROL_TOPIC, 0), 10)[1]
        self._control.assign([TopicPartition(CONTROL_TOPIC, 0, end)])

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "log_level": 0})
        publish = lambda status, progress: producer.produce(  # noqa: E731
            PIPELINES_TOPIC, record(self.pipeline, status, self.command, progress, socket.gethostname()),
            self.pipeline.encode())
        batch = 0
        try:
            while not self._quit.is_set():
                publish("running", {"batch_id": batch, "input_rows_per_second": 40.0,
                                    "processed_rows_per_second": 45.0, "batch_duration_ms": 150, "state_rows": 3,
                                    "late_rows_dropped": 0})
                producer.flush(10)
                batch += 1
                for m in self._control.consume(10, 1.0):
                    if m.error() is None and m.value() is not None and json.loads(m.value()) == {
                            "name": self.pipeline, "action": "stop"}:
                        self.stopped_by_request = True
                        self._quit.set()
            publish("stopped", {})
            producer.flush(10)
        finally:
            self._control.close()

    def stop(self) -> None:
        self._quit.set()
        self.join(30)
