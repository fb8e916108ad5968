"""An ingest server (``freshet ingest serve``) as a process of the test's own, on free ports, and a reader
that keeps what the tests compare: partition, offset, key, value, headers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx

from freshet.client import reading
from freshet.local import free_port


@dataclass
class IngestProcess:
    bootstrap: str
    args: list[str] = field(default_factory=list)
    http_port: int = field(default_factory=free_port)
    syslog_port: int = field(default_factory=free_port)  # UDP and TCP both
    statsd_port: int = field(default_factory=free_port)
    syslog_topic: str = "syslog"
    statsd_topic: str = "metrics"
    process: subprocess.Popen | None = None
    log_path: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout_s: float = 30.0) -> "IngestProcess":
        cmd = [sys.executable, "-m", "freshet.cli.main", "ingest", "serve", "-b", self.bootstrap,
               "--http-port", str(self.http_port), "--syslog-udp", str(self.syslog_port),
               "--syslog-tcp", str(self.syslog_port), "--statsd", str(self.statsd_port),
               "--syslog-topic", self.syslog_topic, "--statsd-topic", self.statsd_topic, *self.args]
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(cmd, stdout=log, stderr=log, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"freshet ingest serve exited with {self.process.returncode}")
            try:
                httpx.get(self.url + "/healthz", timeout=1)
                return self
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise RuntimeError("freshet ingest serve did not answer in time") from None
                time.sleep(0.1)

    def stats(self) -> dict:
        return httpx.get(self.url + "/api/stats", timeout=5).json()

    def stop(self, timeout_s: float = 20.0) -> int:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def __enter__(self) -> "IngestProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        except subprocess.TimeoutExpired:
            pass


def read_messages(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0) -> list[tuple]:
    """(partition, offset, key, value, headers) of every record, from the start to the end."""
    consumer = reading.reader(bootstrap)
    out: list[tuple] = []
    try:
        reading.read_to_end(consumer, [(topic, p, -2) for p in range(partitions)],
                            lambda m: out.append((m.partition(), m.offset(), m.key(), m.value(), m.headers())),
                            timeout_s)
    finally:
        consumer.close()
    return sorted(out, key=lambda r: (r[0], r[1]))
