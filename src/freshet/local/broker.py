"""A Freshet broker as a child process on 127.0.0.1, for the demo, the CLI, benchmarks and tests."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Self


def free_port() -> int:
    """A port on 127.0.0.1 nothing is bound to now. The kernel's pick (bind to port 0) comes from the ephemeral
    range, which every outgoing connection on the machine also draws from: between this pick and the server's
    bind, a client's connection may take it. FRESHET_TEST_PORTS=LOW-HIGH (the test suite sets a range below the
    ephemeral one, one slice per test worker) picks at random in that range instead."""
    chosen = os.environ.get("FRESHET_TEST_PORTS")
    if chosen:
        low, high = (int(n) for n in chosen.split("-"))
        rng = random.SystemRandom()
        for _ in range(200):
            port = rng.randint(low, high)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listens(pid: int, port: int) -> bool:
    """Does process ``pid`` listen on TCP ``port``? Not merely "something answers there": another process may hold
    the port (a free port picked by two at once), and the broker, refused the bind, is about to exit. Read from
    /proc (the listening socket's inode among the process's descriptors); where there is no /proc, a connection."""
    tables = [f"/proc/net/{name}" for name in ("tcp", "tcp6") if os.path.exists(f"/proc/net/{name}")]
    if not tables:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False
    inodes = set()
    for table in tables:
        with open(table) as f:
            next(f)  # the header
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # state LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
        except OSError:
            continue
    return False


class BrokerProcess:
    """``with BrokerProcess() as b: b.bootstrap`` starts a broker and always stops it."""

    def __init__(self, data_dir: str | None = None, port: int | None = None, extra_args: list[str] | None = None,
                 log_path: str | None = None, metrics: bool = False, listeners: list[str] | None = None) -> None:
        """``listeners``: security protocols (``["PLAINTEXT", "SASL_SSL"]``), each on a port of its own on 127.0.0.1,
        the first on ``port``; ``bootstrap_for(protocol)`` gives each one's address."""
        self._tmp = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="freshet-")
            data_dir = os.path.join(self._tmp.name, "data")
        self.data_dir = data_dir
        self._given_args, self._protocols, self._metrics = list(extra_args or []), list(listeners or []), metrics
        # ports this object picked may be picked again until the broker first starts (another process may take a
        # free port between the pick and the broker's bind); after that they stay: its clients know them
        self._choose_ports = port is None
        self._pick_ports(port)
        # beside the data directory (a test's tmp_path, or this object's own temporary directory),
        # so that no run leaves a log behind in the system's temporary directory
        self.log_path = log_path or os.path.join(os.path.dirname(os.path.abspath(data_dir)),
                                                 f"broker-{self.port}.log")
        self.proc: subprocess.Popen | None = None
        self._log = None

    def _pick_ports(self, port: int | None) -> None:
        self.port = port or free_port()
        self.ports = {protocol: (self.port if i == 0 else free_port()) for i, protocol in enumerate(self._protocols)}
        self.extra_args = list(self._given_args)
        for protocol, listener_port in self.ports.items():
            self.extra_args += ["--listener", f"{protocol}://127.0.0.1:{listener_port}"]
        self.metrics_port = free_port() if self._metrics else None
        if self.metrics_port:
            self.extra_args += ["--metrics-port", str(self.metrics_port)]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def bootstrap_for(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"

    @property
    def pid(self) -> int:
        """The running broker's process id."""
        if self.proc is None:
            raise RuntimeError("the broker is not running")
        return self.proc.pid

    @property
    def metrics_url(self) -> str | None:
        """The broker's Prometheus endpoint, when started with ``metrics=True``."""
        return f"http://127.0.0.1:{self.metrics_port}/metrics" if self.metrics_port else None

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        if self.running:  # a second child on the same port would fail to bind and leave this one orphaned
            raise RuntimeError(f"the broker on port {self.port} is already running")
        os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (the child writes to it until stop)
        written_before = self._log.tell()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "freshet.cli.main", "broker", "start", "--data-dir", self.data_dir,
             "--port", str(self.port), *self.extra_args],
            stdout=self._log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                self._close_log()
                if self._choose_ports and "address already in use" in self._log_since(written_before).lower():
                    self._pick_ports(None)  # a port picked for it was taken before its bind: pick others
                    return self.start(max(deadline - time.monotonic(), 1.0))
                raise RuntimeError(f"broker exited with {code}; {self.log_path} ends:\n{self.log_tail()}")
            if all(listens(self.proc.pid, port) for port in self.ports.values() or [self.port]):
                self._choose_ports = False
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"broker did not listen on {self.port} within {timeout}s; {self.log_path} ends:\n"
                           f"{self.log_tail()}")

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """SIGKILL: the crash case."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self._close_log()

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._tmp:
            self._tmp.cleanup()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> Self:
        """Starts the broker, unless it already runs (``with BrokerProcess().start() as b``): either way the
        block's end stops it."""
        return self if self.running else self.start()

    def __exit__(self, *exc) -> None:
        self.close()
