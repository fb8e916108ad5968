"""A Freshet cluster on this machine (issue #46): N controller processes (``python -m freshet.controller``, Raft
over pysyncobj) and N broker processes (``freshet broker start --node-id I --controller ...``), each with its own
ports and data directory under one directory, for ``freshet cluster``, the tests and the benchmarks.

Node ``i`` (1..N) is broker ``i`` and controller ``i`` (controllers: 3, or 1 for a one-broker cluster), as in
Kafka's combined mode. ``cluster.json`` in the directory holds the ports and process ids, so that another
process (``freshet cluster status`` / ``stop``) finds the cluster. Faults for tests: ``kill(i)`` (SIGKILL),
``pause(i)`` / ``resume(i)`` (SIGSTOP / SIGCONT), ``restart(i)``, ``wipe(i)`` (a broker's data directory),
``kill_controller(i)``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Self

from .broker import free_port

STATE_FILE = "cluster.json"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"  # replica.selector.class


class ClusterError(Exception):
    """The one line ``freshet cluster`` prints."""


class _Exited(Exception):
    """A process of the cluster ended while it was starting."""


@dataclass
class Node:
    node_id: int
    port: int  # the broker's Kafka port
    controller_port: int | None = None  # the controller's JSON endpoint (None: no controller on this node)
    raft_port: int | None = None
    broker_pid: int | None = None
    controller_pid: int | None = None
    decommissioned: bool = False  # its broker left the cluster (freshet cluster decommission): not started again


@dataclass
class ClusterState:
    directory: str
    nodes: list[Node] = field(default_factory=list)
    session_timeout_ms: int = 9000
    broker_args: list[str] = field(default_factory=list)
    controller_args: list[str] = field(default_factory=list)
    racks: list[str] = field(default_factory=list)  # broker i's rack: racks[(i - 1) % len(racks)]

    def save(self) -> None:
        path = os.path.join(self.directory, STATE_FILE)
        with open(path + ".tmp", "w") as f:
            json.dump(asdict(self), f, indent=2)
        os.replace(path + ".tmp", path)

    @classmethod
    def load(cls, directory: str) -> "ClusterState":
        with open(os.path.join(directory, STATE_FILE)) as f:
            raw = json.load(f)
        raw["nodes"] = [Node(**n) for n in raw["nodes"]]
        return cls(**raw)


def ask_controller(address: tuple[str, int], request: dict, timeout: float = 10.0,
                   password: str | None = None) -> dict:
    """One request to a controller's JSON endpoint (newline-delimited JSON); given the cluster secret, proved
    first to a controller that asks for it (the challenge-response of ``freshet.controller.auth``, which this
    package may not import)."""
    with socket.create_connection(address, timeout=timeout) as sock, sock.makefile("rb") as answers:
        def exchange(message: dict) -> dict:
            sock.sendall(json.dumps(message).encode() + b"\n")
            line = answers.readline()
            if not line:
                raise ConnectionError(f"controller {address} closed the connection")
            return json.loads(line)

        if password:
            def proof(role: str, nonce: str) -> str:
                return hmac.new(password.encode(), f"{role} {nonce}".encode(), hashlib.sha256).hexdigest()

            nonce = secrets.token_hex(16)
            hello = exchange({"op": "hello", "nonce": nonce})
            if hello.get("auth"):
                if not hmac.compare_digest(str(hello.get("proof")), proof("controller", nonce)):
                    raise PermissionError(f"controller {address} does not know the cluster secret")
                if exchange({"op": "auth", "proof": proof("client", str(hello.get("nonce")))}).get("error") != "NONE":
                    raise PermissionError(f"controller {address} refused the cluster secret")
        return exchange(request)


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:  # a zombie child of ours counts as gone
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


class LocalCluster:
    """``with LocalCluster(brokers=3) as c: c.bootstrap`` starts 3 controllers and 3 brokers and always stops
    them; ``LocalCluster.attach(directory)`` finds one ``freshet cluster start`` left running."""

    def __init__(self, brokers: int = 3, directory: str | None = None, base_port: int | None = None,
                 session_timeout_ms: int = 9000, broker_args: list[str] | None = None,
                 default_replication_factor: int | None = None, controller_args: list[str] | None = None,
                 racks: list[str] | None = None, endpoint_auth: bool = True) -> None:
        """``endpoint_auth``: the controllers' JSON endpoint asks for the cluster secret (``--endpoint-auth``),
        which the brokers, ``freshet cluster``'s commands and clients given ``password=self.password`` prove."""
        if brokers < 1:
            raise ClusterError("a cluster needs at least one broker")
        self._tmp = None
        if directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="freshet-cluster-")
            directory = self._tmp.name
        self.directory = os.path.abspath(directory)
        controllers = 1 if brokers == 1 else 3
        nodes = []
        for i in range(1, brokers + 1):
            if base_port is None:
                ports = (free_port(), free_port(), free_port())
            else:
                ports = (base_port + i - 1, base_port + 100 + i - 1, base_port + 200 + i - 1)
            has_controller = i <= controllers
            nodes.append(Node(i, ports[0], ports[1] if has_controller else None, ports[2] if has_controller else None))
        factor = default_replication_factor or min(3, brokers)
        args = ["--default-replication-factor", str(factor), "--offsets-topic-replication-factor",
                str(min(3, brokers)), "--share-state-topic-replication-factor", str(min(3, brokers)),
                *(broker_args or [])]
        controller_args = [*(["--endpoint-auth"] if endpoint_auth else []), *(controller_args or [])]
        self.state = ClusterState(self.directory, nodes, session_timeout_ms, args, controller_args,
                                  list(racks or []))
        self._procs: dict[tuple[str, int], subprocess.Popen] = {}

    @classmethod
    def attach(cls, directory: str) -> "LocalCluster":
        """The cluster ``freshet cluster start`` left running in ``directory``."""
        path = os.path.join(directory, STATE_FILE)
        if not os.path.exists(path):
            raise ClusterError(f"no cluster in {directory} (no {STATE_FILE}): start one with freshet cluster start")
        self = cls.__new__(cls)
        self._tmp = None
        self.directory = os.path.abspath(directory)
        self.state = ClusterState.load(self.directory)
        self._procs = {}
        return self

    def reload(self) -> Self:
        """Reads ``cluster.json`` again: what another process (``freshet cluster add-broker``, ``decommission``)
        changed in this cluster."""
        self.state = ClusterState.load(self.directory)
        return self

    # -- where things are ------------------------------------------------------------------------------------
    @property
    def nodes(self) -> dict[int, Node]:
        return {n.node_id: n for n in self.state.nodes}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.state.nodes)

    def bootstrap_of(self, node_id: int) -> str:
        return f"127.0.0.1:{self.nodes[node_id].port}"

    @property
    def controller_addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", n.controller_port) for n in self.state.nodes if n.controller_port]

    def data_dir(self, node_id: int) -> str:
        return os.path.join(self.directory, f"broker-{node_id}")

    def log_path(self, kind: str, node_id: int) -> str:
        return os.path.join(self.directory, "logs", f"{kind}-{node_id}.log")

    def metrics_url(self, node_id: int) -> str | None:
        """Broker ``node_id``'s Prometheus endpoint, when started with ``--metrics-port`` (the last one it printed)."""
        found = None
        try:
            with open(self.log_path("broker", node_id), errors="replace") as f:
                for line in f:
                    if line.startswith("freshet broker metrics on "):
                        found = line.split()[-1]
        except OSError:
            pass
        return found

    def log_tail(self, kind: str, node_id: int, lines: int = 20) -> str:
        try:
            with open(self.log_path(kind, node_id), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    # -- life ----------------------------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> Self:
        os.makedirs(os.path.join(self.directory, "logs"), exist_ok=True)
        if os.path.exists(os.path.join(self.directory, STATE_FILE)):
            running = LocalCluster.attach(self.directory)
            if running.running_nodes():
                raise ClusterError(f"a cluster already runs in {self.directory} (broker(s) "
                                   f"{running.running_nodes()}): freshet cluster stop --data-dir {self.directory}")
        for node in self.state.nodes:
            if node.controller_port:
                self._start_controller(node)
        self.state.save()
        for node in self.state.nodes:
            if not node.decommissioned:
                self._start_broker(node)
        self.state.save()
        try:
            self.wait_until(lambda m: self._all_up(m), timeout, "every broker registered and unfenced")
        except (ClusterError, _Exited) as exc:
            self.stop()
            raise ClusterError(str(exc)) from None
        return self

    def _all_up(self, metadata: dict) -> bool:
        for (kind, node_id), proc in self._procs.items():
            if proc.poll() is not None:
                raise _Exited(f"{kind} {node_id} exited with {proc.returncode}: "
                              f"{self.log_tail(kind, node_id, 1).strip()} ({self.log_path(kind, node_id)})")
        wanted = sorted(n.node_id for n in self.state.nodes if not n.decommissioned)
        return sorted(b["broker_id"] for b in metadata["brokers"] if not b["fenced"]) == wanted

    def _voters(self) -> str:
        return ",".join(f"{n.node_id}@127.0.0.1:{n.raft_port}" for n in self.state.nodes if n.raft_port)

    def _spawn(self, kind: str, node_id: int, argv: list[str]) -> subprocess.Popen:
        # the brokers (and anything they start) prove the cluster secret to controllers that ask for it
        env = {**os.environ, "FRESHET_CONTROLLER_PASSWORD_FILE": self.password_file}
        with open(self.log_path(kind, node_id), "ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=env)  # outlives `freshet cluster start`
        self._procs[(kind, node_id)] = proc
        return proc

    @property
    def password_file(self) -> str:
        """The cluster secret every controller is given (``--password-file``: Raft traffic encrypted and
        authenticated), made at the first start, readable by its owner only."""
        path = os.path.join(self.directory, "controller.password")
        if not os.path.exists(path):
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
        return path

    @property
    def password(self) -> str:
        """The cluster secret (what ``password_file`` holds): what a client of the controllers proves with
        ``python -m freshet.controller --endpoint-auth``."""
        with open(self.password_file, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n")

    def _start_controller(self, node: Node) -> None:
        proc = self._spawn("controller", node.node_id, [
            sys.executable, "-m", "freshet.controller", "--node-id", str(node.node_id), "--voters", self._voters(),
            "--listen", f"127.0.0.1:{node.controller_port}",
            "--data-dir", os.path.join(self.directory, f"controller-{node.node_id}"),
            "--session-timeout-ms", str(self.state.session_timeout_ms), "--password-file", self.password_file,
            *self.state.controller_args])
        node.controller_pid = proc.pid

    def _start_broker(self, node: Node) -> None:
        controllers = ",".join(f"{h}:{p}" for h, p in self.controller_addresses)
        proc = self._spawn("broker", node.node_id, [
            sys.executable, "-m", "freshet.cli.main", "broker", "start", "--node-id", str(node.node_id),
            "--controller", controllers, "--data-dir", self.data_dir(node.node_id), "--port", str(node.port),
            *self.state.broker_args, *self.rack_args(node.node_id)])
        node.broker_pid = proc.pid

    def rack_of(self, node_id: int) -> str | None:
        racks = self.state.racks
        return racks[(node_id - 1) % len(racks)] if racks else None

    def rack_args(self, node_id: int) -> list[str]:
        """``--rack`` of broker ``node_id``, and with racks, consumers with client.rack read their rack's follower
        (KIP-392's RackAwareReplicaSelector)."""
        rack = self.rack_of(node_id)
        return ["--rack", rack, "--replica-selector-class", RACK_AWARE_SELECTOR] if rack else []

    def running_nodes(self) -> list[int]:
        return [n.node_id for n in self.state.nodes if _alive(n.broker_pid)]

    def running_controllers(self) -> list[int]:
        return [n.node_id for n in self.state.nodes if _alive(n.controller_pid)]

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (SIGCONT first, for a paused one) to every broker, then every controller; SIGKILL after
        ``timeout``."""
        for kind in ("broker", "controller"):
            pids = [getattr(n, f"{kind}_pid") for n in self.state.nodes]
            for pid in filter(_alive, pids):
                for sig in (signal.SIGCONT, signal.SIGTERM):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
            end = time.monotonic() + timeout
            for pid in filter(None, pids):
                while _alive(pid) and time.monotonic() < end:
                    time.sleep(0.05)
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
            for node in self.state.nodes:
                setattr(node, f"{kind}_pid", None)
        self._reap()
        if os.path.isdir(self.directory):
            self.state.save()

    def _reap(self) -> None:
        """Forgets (and reaps) the child processes that have ended."""
        self._procs = {k: p for k, p in self._procs.items() if p.poll() is None}

    def close(self) -> None:
        self.stop()
        if self._tmp:
            self._tmp.cleanup()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- faults --------------------------------------------------------------------------------------------
    def _signal(self, node_id: int, sig: int, kind: str = "broker") -> int:
        pid = getattr(self.nodes[node_id], f"{kind}_pid")
        if not _alive(pid):
            raise ClusterError(f"{kind} {node_id} is not running")
        os.kill(pid, sig)
        return pid

    def kill(self, node_id: int) -> None:
        """kill -9 of broker ``node_id``; returns once the process is gone."""
        pid = self._signal(node_id, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.01)
        self.nodes[node_id].broker_pid = None
        self._reap()

    def kill_controller(self, node_id: int) -> None:
        pid = self._signal(node_id, signal.SIGKILL, "controller")
        while _alive(pid):
            time.sleep(0.01)
        self.nodes[node_id].controller_pid = None
        self._reap()

    def pause(self, node_id: int) -> None:
        self._signal(node_id, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        self._signal(node_id, signal.SIGCONT)

    def wipe(self, node_id: int) -> None:
        """Removes a stopped broker's data directory (a replacement disk)."""
        if _alive(self.nodes[node_id].broker_pid):
            raise ClusterError(f"broker {node_id} is running: stop or kill it before wiping its data")
        shutil.rmtree(self.data_dir(node_id), ignore_errors=True)

    def restart(self, node_id: int, timeout: float = 120.0) -> None:
        """Starts broker ``node_id`` again (stopping it first if it runs) and waits until it is unfenced. A
        broker killed a moment ago is fenced first (its session closed), so the new one may register."""
        node = self.nodes[node_id]
        if _alive(node.broker_pid):
            os.kill(node.broker_pid, signal.SIGCONT)
            os.kill(node.broker_pid, signal.SIGTERM)
            while _alive(node.broker_pid):
                time.sleep(0.05)
        self.wait_until(lambda m: self._fenced_or_gone(m, node_id), timeout, f"broker {node_id} fenced")
        self._start_broker(node)
        self.state.save()
        self.wait_until(lambda m: not self._fenced_or_gone(m, node_id), timeout, f"broker {node_id} unfenced")

    def stop_broker(self, node_id: int, timeout: float = 60.0) -> None:
        """SIGTERM to broker ``node_id`` (a controlled shutdown: its leaderships move to other ISR members
        before it exits); returns once the process is gone (SIGKILL after ``timeout``)."""
        pid = self._signal(node_id, signal.SIGCONT)
        os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < end:
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        self.nodes[node_id].broker_pid = None
        self._reap()
        self.state.save()

    def rolling_restart(self, timeout: float = 120.0, on_restart: Callable[[int], None] | None = None) -> None:
        """Restarts the brokers one at a time, as an operator upgrades a cluster: each is stopped with SIGTERM
        (controlled shutdown), started again, and the next one waits until every partition has its whole ISR
        again (no partition under-replicated), so that no partition ever loses two replicas at once."""
        for node_id in sorted(n.node_id for n in self.state.nodes if not n.decommissioned):
            self.wait_until(self.fully_replicated, timeout, "every partition's whole ISR")
            self.restart(node_id, timeout)
            if on_restart:
                on_restart(node_id)
        self.wait_until(self.fully_replicated, timeout, "every partition's whole ISR")

    def add_broker(self, timeout: float = 120.0) -> int:
        """Starts one more broker (the next node id, no controller: the voters stay as they are) with the
        cluster's broker arguments, and returns its id once it is unfenced. It holds nothing until partitions are
        moved to it (freshet cluster rebalance) or new topics are placed."""
        node_id = max(self.nodes) + 1
        ports = sorted(n.port for n in self.state.nodes)
        consecutive = ports == list(range(ports[0], ports[0] + len(ports)))
        port = ports[-1] + 1 if consecutive and _port_free(ports[-1] + 1) else free_port()
        node = Node(node_id, port)
        self.state.nodes.append(node)
        self._start_broker(node)
        self.state.save()
        self.wait_until(lambda m: not self._fenced_or_gone(m, node_id) and any(
            b["broker_id"] == node_id for b in m["brokers"]), timeout, f"broker {node_id} unfenced")
        return node_id

    def decommissioned(self, node_id: int) -> None:
        """Broker ``node_id`` left the cluster: stopped, and not started again by this cluster."""
        if _alive(self.nodes[node_id].broker_pid):
            self.stop_broker(node_id)
        self.nodes[node_id].decommissioned = True
        self.state.save()

    @staticmethod
    def fully_replicated(metadata: dict) -> bool:
        """Every partition led and its ISR holding every replica."""
        return all(p["leader"] >= 0 and len(p["isr"]) == len(p["replicas"])
                   for t in metadata["topics"] for p in t["partitions"])

    @staticmethod
    def _fenced_or_gone(metadata: dict, node_id: int) -> bool:
        return all(b["fenced"] for b in metadata["brokers"] if b["broker_id"] == node_id)

    # -- looking -------------------------------------------------------------------------------------------
    def metadata(self) -> dict:
        """The metadata of the first controller that answers (its ``controller_id`` is the active one)."""
        last: Exception | None = None
        for address in self.controller_addresses:
            try:
                answer = ask_controller(address, {"op": "metadata"}, timeout=5, password=self.password)
                if "brokers" in answer:
                    return answer
            except (OSError, ValueError) as exc:
                last = exc
        raise ClusterError(f"no controller of {self.controller_addresses} answered ({last!r})")

    def wait_until(self, predicate: Callable[[dict], object], timeout: float = 60.0, what: str = "a condition"):
        """Polls the controllers' metadata until ``predicate(metadata)`` is truthy and returns that value."""
        end = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < end:
            try:
                value = predicate(self.metadata())
                if value:
                    return value
            except (ClusterError, KeyError, LookupError) as exc:
                last = exc
            time.sleep(0.05)
        raise ClusterError(f"gave up waiting for {what} after {timeout:.0f} s ({last!r})")

    def partition(self, topic: str, index: int, metadata: dict | None = None) -> dict | None:
        metadata = metadata or self.metadata()
        for t in metadata["topics"]:
            if t["name"] == topic:
                return t["partitions"][index] if index < len(t["partitions"]) else None
        return None

    def leader(self, topic: str, index: int = 0) -> int:
        part = self.partition(topic, index)
        return part["leader"] if part else -1
