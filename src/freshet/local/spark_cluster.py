"""A Spark standalone cluster (a master and workers) and a Spark Connect server on 127.0.0.1, started from the
pip-installed PySpark: its jars and ``bin/spark-class`` (the wheel has no ``start-master.sh``).

Everything a cluster is lives in one directory: ``cluster.json`` (ports, process ids, URLs), each process's
log, and the workers' work directories (executors' stdout/stderr, the Python files Spark ships). The processes
are started in sessions of their own, so a cluster outlives the command that started it
(``freshet spark start-cluster``) until ``stop`` (``freshet spark stop-cluster``)::

    with SparkCluster("/tmp/cluster", workers=2) as cluster:
        cluster.master_url      # spark://127.0.0.1:7077 -> freshet run ... --master
        cluster.start_connect() # sc://127.0.0.1:15002   -> freshet run ... --remote

Executors start the Python interpreter the driver names (``PYSPARK_PYTHON``, which ``freshet.spark.session``
sets to its own), so every process imports the same Freshet. On several machines the same holds: Freshet and
its dependencies installed at the same path on every worker.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Self

from .broker import free_port, listens

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STATE_FILE = "cluster.json"


def connect_server_conf(port: int, host: str, cores: int, ui_port: int) -> dict[str, str]:
    """A Spark Connect server's start-up settings. The SQL settings every Freshet session runs with (state
    store, time zone...) are set by each client session (``freshet.spark.session``); these are the ones a
    running server cannot change."""
    return {
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.port": str(ui_port),
        "spark.cores.max": str(cores),
        "spark.executor.cores": "1",  # spread over the workers: one lost worker costs part of the server only
        "spark.default.parallelism": str(cores),  # what a client reads to size its source's tasks
        "spark.python.unix.domain.socket.enabled": "true",
        # Python workers fork from a daemon that imported pandas, PyArrow and Freshet's source and sink once, as
        # a local session's do (freshet.spark.daemon): else each of the server's and executors' workers imports
        # them again (~0.7 CPU-s a worker, ~20 workers for a scenario of four queries)
        "spark.python.daemon.module": "freshet.spark.daemon",
        "spark.driver.extraJavaOptions": "-Xss16m",
    }


class SparkClusterError(RuntimeError):
    """A cluster that cannot be started, found or reached; the message says why in one line."""


def spark_home() -> str:
    """The pip-installed PySpark's directory: it has Spark's jars and bin/."""
    try:
        import pyspark
    except ImportError:
        raise SparkClusterError("PySpark is not installed (make install)") from None
    return os.path.dirname(pyspark.__file__)


def _connect_jar(home: str) -> str:
    jars = [j for j in os.listdir(os.path.join(home, "jars")) if j.startswith("spark-connect_")]
    if not jars:
        raise SparkClusterError(f"no spark-connect jar in {home}/jars: this PySpark cannot serve Spark Connect")
    return os.path.join(home, "jars", max(jars))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of this process counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _spark_jvm(pid: int) -> bool:
    """Whether ``pid`` is still one of Spark's JVMs (a pid in cluster.json may have been reused since, e.g. after a
    reboot: such a process is neither waited for nor signalled)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"org.apache.spark" in f.read() and _alive(pid)
    except OSError:
        return False


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class WorkerState:
    pid: int
    ui_port: int
    cores: int
    memory: str
    log: str


@dataclass
class ClusterState:
    """What ``cluster.json`` holds: enough for another process to find, use and stop the cluster."""

    host: str
    master_port: int
    master_ui_port: int
    master_pid: int
    workers: list[WorkerState] = field(default_factory=list)
    connect_port: int | None = None
    connect_pid: int | None = None
    connect_ui_port: int | None = None

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.master_port}"

    @property
    def master_ui(self) -> str:
        return f"http://{self.host}:{self.master_ui_port}"

    @property
    def connect_url(self) -> str | None:
        return f"sc://{self.host}:{self.connect_port}" if self.connect_port else None

    @classmethod
    def load(cls, path: str) -> ClusterState:
        with open(path) as f:
            raw = json.load(f)
        raw["workers"] = [WorkerState(**w) for w in raw.get("workers", [])]
        return cls(**raw)

    def save(self, path: str) -> None:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(asdict(self), f, indent=2)
        os.replace(tmp, path)


class SparkCluster:
    """A Spark standalone master with ``workers`` workers of ``cores`` cores each, in ``directory``.

    ``SparkCluster(directory)`` of a directory that already holds a running cluster finds it (``attach``)."""

    def __init__(self, directory: str, workers: int = 2, cores: int = 1, memory: str = "2g",
                 master_port: int | None = None, master_ui_port: int | None = None, host: str = "127.0.0.1") -> None:
        if workers < 1:
            raise SparkClusterError(f"a cluster needs at least one worker, not {workers}")
        if cores < 1:
            raise SparkClusterError(f"a worker needs at least one core, not {cores}")
        self.directory = os.path.abspath(directory)
        self.worker_count = workers
        self.cores = cores
        self.memory = memory
        self.host = host
        self._master_port = master_port
        self._master_ui_port = master_ui_port
        self.state: ClusterState | None = None

    # ---- where things are

    @property
    def state_path(self) -> str:
        return os.path.join(self.directory, STATE_FILE)

    def _require(self) -> ClusterState:
        if self.state is None:
            raise SparkClusterError(f"no Spark cluster is running in {self.directory} (freshet spark start-cluster)")
        return self.state

    @property
    def master_url(self) -> str:
        return self._require().master_url

    @property
    def master_ui(self) -> str:
        return self._require().master_ui

    @property
    def connect_url(self) -> str:
        url = self._require().connect_url
        if url is None:
            raise SparkClusterError(f"no Spark Connect server runs on the cluster in {self.directory} "
                                    "(freshet spark start-connect)")
        return url

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "SPARK_HOME": spark_home(),
            "SPARK_LOCAL_IP": self.host,
            "SPARK_LOG_DIR": self.directory,
            "SPARK_NO_DAEMONIZE": "1",
            # the Python of this environment (it has freshet) for the executors' and the Connect driver's workers
            "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON", sys.executable),
        })
        env.pop("SPARK_REMOTE", None)
        return env

    def _spawn(self, name: str, args: list[str]) -> tuple[int, str]:
        """Start a JVM in a session of its own, its output in ``<directory>/<name>.log``; its pid (spark-class
        execs java, so the pid is the JVM's)."""
        log = os.path.join(self.directory, f"{name}.log")
        with open(log, "ab") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self._env(), cwd=self.directory, start_new_session=True)
        return proc.pid, log

    def _spark_class(self, *args: str) -> list[str]:
        return [os.path.join(spark_home(), "bin", "spark-class"), *args]

    # ---- life cycle

    def attach(self) -> bool:
        """Find a running cluster in the directory; False when there is none (a stale file is removed)."""
        if not os.path.exists(self.state_path):
            return False
        try:
            state = ClusterState.load(self.state_path)
        except (OSError, ValueError, TypeError) as exc:
            raise SparkClusterError(f"{self.state_path} cannot be read: {exc}") from None
        if not _spark_jvm(state.master_pid):
            for pid in [w.pid for w in state.workers] + ([state.connect_pid] if state.connect_pid else []):
                if _spark_jvm(pid):
                    _terminate(pid)
            os.remove(self.state_path)
            return False
        self.state = state
        return True

    def start(self, timeout: float = 120.0) -> SparkCluster:
        os.makedirs(self.directory, exist_ok=True)
        if self.attach():
            raise SparkClusterError(f"a Spark cluster already runs in {self.directory} ({self.state.master_url}); "
                                    "freshet spark stop-cluster first")
        master_port = self._master_port or free_port()
        ui_port = self._master_ui_port or free_port()
        for port in (master_port, ui_port):
            if _port_open(port):
                raise SparkClusterError(f"port {port} on {self.host} is taken")
        pid, _ = self._spawn("master", self._spark_class(
            MASTER_CLASS, "--host", self.host, "--port", str(master_port), "--webui-port", str(ui_port)))
        self.state = ClusterState(self.host, master_port, ui_port, pid)
        self.state.save(self.state_path)
        try:
            self._wait(lambda: listens(pid, master_port), timeout, "the master", pid)  # its own socket
            for i in range(self.worker_count):
                self._start_worker(i)
            self.state.save(self.state_path)
            ports = {w.ui_port for w in self.state.workers}
            self._wait(lambda: ports <= self._alive_worker_ports(), timeout, "the workers")
        except BaseException:
            self.stop()
            raise
        return self

    def _start_worker(self, i: int) -> WorkerState:
        """Start worker ``i``: as configured, or (a restart) with the cores and memory it had."""
        state = self._require()
        cores, memory = ((state.workers[i].cores, state.workers[i].memory) if i < len(state.workers)
                         else (self.cores, self.memory))
        ui_port = free_port()
        work = os.path.join(self.directory, f"worker-{i}")
        os.makedirs(work, exist_ok=True)
        pid, log = self._spawn(f"worker-{i}", self._spark_class(
            WORKER_CLASS, "--host", self.host, "--cores", str(cores), "--memory", memory,
            "--webui-port", str(ui_port), "--work-dir", work, state.master_url))
        worker = WorkerState(pid, ui_port, cores, memory, log)
        if i < len(state.workers):
            state.workers[i] = worker
        else:
            state.workers.append(worker)
        return worker

    def _wait(self, ready, timeout: float, what: str, pid: int | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if pid is not None and not _alive(pid):
                raise SparkClusterError(f"{what} exited at start; see its log in {self.directory}")
            time.sleep(0.25)
        raise SparkClusterError(f"{what} did not come up within {timeout:.0f} s; see the logs in {self.directory}")

    def status(self) -> dict:
        """The master's own view (its /json page): workers, cores, running applications."""
        state = self._require()
        try:
            with urllib.request.urlopen(f"{state.master_ui}/json/", timeout=5) as r:
                return json.load(r)
        except OSError as exc:
            raise SparkClusterError(f"the master's UI at {state.master_ui} does not answer: {exc}") from None
        except ValueError:  # a master still starting may answer before its page is ready
            raise SparkClusterError(f"the master's UI at {state.master_ui} answered no status yet") from None

    def _alive_worker_ports(self) -> set[int]:
        """The UI ports of the workers the master counts as alive (a worker killed a moment ago may still be
        among them: the master notices after spark.worker.timeout)."""
        try:
            workers = self.status().get("workers", [])
        except SparkClusterError:
            return set()
        return {int(w["webuiaddress"].rsplit(":", 1)[1]) for w in workers
                if w.get("state") == "ALIVE" and w.get("webuiaddress")}

    def total_cores(self) -> int:
        return sum(w.cores for w in self._require().workers)

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker ``i`` and its executors, as when its machine dies."""
        worker = self._require().workers[i]
        for pid in _descendants(worker.pid) + [worker.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def restart_worker(self, i: int, timeout: float = 120.0) -> None:
        """Start worker ``i`` again (after ``kill_worker``) and wait until the master counts it."""
        worker = self._start_worker(i)
        self._require().save(self.state_path)
        self._wait(lambda: worker.ui_port in self._alive_worker_ports(), timeout, f"worker {i}", worker.pid)

    def start_connect(self, port: int | None = None, cores: int | None = None, timeout: float = 180.0) -> str:
        """A Spark Connect server whose driver runs on this cluster, its executors holding ``cores`` of the
        cluster's cores (default all: an application keeps its cores while it runs, so leave some for
        ``freshet run --master`` jobs); its ``sc://`` URL."""
        state = self._require()
        if state.connect_pid and _spark_jvm(state.connect_pid):
            raise SparkClusterError(f"a Spark Connect server already runs at {state.connect_url}")
        port = port or free_port()
        if _port_open(port):
            raise SparkClusterError(f"port {port} on {self.host} is taken")
        ui_port = free_port()
        cores = cores or self.total_cores()
        if not 1 <= cores <= self.total_cores():
            raise SparkClusterError(f"the Connect server can hold 1 to {self.total_cores()} cores, not {cores}")
        conf = connect_server_conf(port, self.host, cores, ui_port)
        args = [os.path.join(spark_home(), "bin", "spark-submit"), "--class", CONNECT_CLASS,
                "--master", state.master_url, "--name", "freshet-connect"]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        pid, _ = self._spawn("connect", [*args, _connect_jar(spark_home())])
        state.connect_pid, state.connect_port, state.connect_ui_port = pid, port, ui_port
        state.save(self.state_path)
        try:
            self._wait(lambda: listens(pid, port), timeout, "the Spark Connect server", pid)
        except BaseException:
            self.stop_connect()
            raise
        return state.connect_url

    def stop_connect(self) -> None:
        state = self._require()
        if state.connect_pid and _spark_jvm(state.connect_pid):
            _terminate(state.connect_pid)
        state.connect_pid = state.connect_port = state.connect_ui_port = None
        state.save(self.state_path)

    def stop(self) -> None:
        """Stop the Connect server, the workers (their executors with them) and the master."""
        if self.state is None and not self.attach():
            return
        state = self._require()
        pids = ([state.connect_pid] if state.connect_pid else []) + [w.pid for w in state.workers] + [state.master_pid]
        for pid in pids:
            if _spark_jvm(pid):
                _terminate(pid)
        try:
            os.remove(self.state_path)
        except FileNotFoundError:
            pass
        self.state = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (a worker's executors and their Python workers), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _terminate(pid: int, timeout: float = 20.0) -> None:
    """SIGTERM (the JVM's shutdown hooks stop executors and drivers), then SIGKILL of what is left."""
    below = _descendants(pid)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        try:  # our own child: reap it so that it does not linger as a zombie
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    for p in below + [pid]:
        if _alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
