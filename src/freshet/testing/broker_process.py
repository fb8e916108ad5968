"""A Freshet broker as a child process on 127.0.0.1, for tests, benchmarks and the demo."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerProcess:
    """``with BrokerProcess() as b: b.bootstrap`` starts a broker and always stops it."""

    def __init__(self, data_dir: str | None = None, port: int | None = None, extra_args: list[str] | None = None,
                 log_path: str | None = None, metrics: bool = False) -> None:
        self._tmp = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="freshet-")
            data_dir = self._tmp.name
        self.data_dir = data_dir
        self.port = port or free_port()
        self.extra_args = list(extra_args or [])
        self.metrics_port = free_port() if metrics else None
        if self.metrics_port:
            self.extra_args += ["--metrics-port", str(self.metrics_port)]
        self.log_path = log_path or os.path.join(tempfile.gettempdir(), f"freshet-broker-{self.port}.log")
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        """The broker's Prometheus endpoint, when started with ``metrics=True``."""
        return f"http://127.0.0.1:{self.metrics_port}/metrics" if self.metrics_port else None

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "freshet.cli.main", "broker", "start", "--data-dir", self.data_dir,
             "--port", str(self.port), *self.extra_args],
            stdout=self._log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"broker did not listen on {self.port} within {timeout}s")

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: the crash case."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self) -> "BrokerProcess":
        self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._tmp:
            self._tmp.cleanup()

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
