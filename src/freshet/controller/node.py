"""A controller node: the metadata state machine replicated by pysyncobj's Raft, and a small JSON endpoint.

Every node holds the whole ``ClusterMetadata`` and applies the Raft log's commands in order; the Raft leader is
the active controller (as in KRaft: the active controller is the leader of the metadata quorum). A command
given to any node is forwarded by pysyncobj to the leader and answered once this node has applied it, so a
reader of the same node sees its own write. The active controller alone runs the session check (fencing
brokers whose heartbeats stopped), and only once it has led for a whole session timeout, so that a new leader
gives every broker a full session before fencing it.

The endpoint (``--listen``) speaks newline-delimited JSON, one request a line:
``{"op": "command", "command": {"command": "CreateTopic", "name": ..., ...}}`` → the command's result (a
broker's RegisterBroker / BrokerHeartbeat with ``"session": true`` makes the connection its session, fenced when
it closes), ``{"op": "metadata"[, "since": VERSION, "wait_ms": MS]}`` → the metadata snapshot with its
``version`` and the controller's id (a long poll when ``since`` is given), ``{"op": "status"}`` → Raft status.
It is the interface until the brokers speak BrokerRegistration / BrokerHeartbeat / AlterPartition / CreateTopics
to the controller over the Kafka protocol (issue #46's next step).
"""

from __future__ import annotations

import json
import logging
import os
import random
import socketserver
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated

from . import auth
from . import commands as c
from .auth import PASSWORD_FILE_ENV, read_password_file  # noqa: F401 (where the controller's callers find them)
from .placement import LeaderBalance, imbalanced_leaders
from .state import ClusterMetadata, Result

logger = logging.getLogger(__name__)

DEFAULT_SESSION_TIMEOUT_MS = 9000  # Kafka's broker.session.timeout.ms


@dataclass(frozen=True)
class Voter:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def parse_voters(text: str) -> list[Voter]:
    """Kafka's ``controller.quorum.voters`` form: ``1@127.0.0.1:9101,2@127.0.0.1:9102,...``."""
    voters = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        try:
            node_id, address = item.split("@", 1)
            host, port = address.rsplit(":", 1)
            voters.append(Voter(int(node_id), host, int(port)))
        except ValueError:
            raise ValueError(f"voter {item!r} is not ID@HOST:PORT") from None
    ids = [v.node_id for v in voters]
    if not voters or len(set(ids)) != len(ids):
        raise ValueError(f"voters {text!r}: give each node id once, as ID@HOST:PORT,...")
    return voters


def _fsync_path(path: str) -> None:
    """fsyncs a file and the directory naming it (a rename is durable once its directory is)."""
    for target, flags in ((path, os.O_RDONLY), (os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)):
        if os.path.exists(target):
            fd = os.open(target, flags)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


class _JournalWrapper:
    """Passes what it does not define on to the pysyncobj journal it wraps."""

    _inner: Any

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __len__(self) -> int:
        return len(self._inner)

    def __getitem__(self, item):
        return self._inner[item]


class DurableJournal(_JournalWrapper):
    """pysyncobj's file journal, made durable before Raft answers: pysyncobj writes entries into an mmap and the
    term and vote into a file renamed into place, and syncs neither, so a power loss could take back a change a
    majority had acknowledged or a vote a node had given. Every change here is msync'd (entries) or fsync'd
    (term and vote, and the snapshot a log compaction wrote before the entries it replaces are dropped) before
    pysyncobj goes on to send the message that depends on it."""

    def __init__(self, inner, snapshot_path: str | None) -> None:
        self._inner = inner
        self._meta_path = inner._FileJournal__metaStorer.getPath()
        self._snapshot_path = snapshot_path
        inner.flush()
        _fsync_path(self._meta_path)

    def add(self, command, idx, term) -> None:
        self._inner.add(command, idx, term)
        self._inner.flush()

    def clear(self) -> None:
        self._inner.clear()
        self._inner.flush()

    def deleteEntriesFrom(self, entry_from) -> None:  # noqa: N802 (pysyncobj's names)
        self._inner.deleteEntriesFrom(entry_from)
        self._inner.flush()

    def deleteEntriesTo(self, entry_to) -> None:  # noqa: N802
        if self._snapshot_path:
            _fsync_path(self._snapshot_path)
        self._inner.deleteEntriesTo(entry_to)
        self._inner.flush()

    def setCurrentTerm(self, term, voted_for) -> None:  # noqa: N802
        self._inner.setCurrentTerm(term, voted_for)
        _fsync_path(self._meta_path)


class ConflictOnlyTruncation(_JournalWrapper):
    """Raft's §5.3 rule for a follower's log, which pysyncobj does not keep: on an AppendEntries whose
    ``prevLogIdx`` matches, pysyncobj deletes every entry after ``prevLogIdx`` and appends the message's entries,
    so a stale or repeated message carrying fewer entries (a leader resending from a ``nextIndex`` it moved back
    on a late failure reply) removes entries the follower already has and has acknowledged. If the leader then
    fails, an entry a majority had acknowledged can be missing from that majority: a committed change lost.

    Here a truncation pysyncobj asks for during an AppendEntries is deferred and only done at the first entry
    that conflicts (same index, another term); entries already held with the same index and term are kept
    (by Raft's log matching they are the same). ``guard_append_entries`` brackets each message and also caps
    the message's commit index at its last new entry (Raft: commitIndex = min(leaderCommit, index of last new
    entry)), as the entries kept after it are not vouched for by this message."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self._deferring = False
        self._pending: int | None = None

    def begin(self) -> None:
        self._deferring, self._pending = True, None

    def end(self) -> None:
        self._deferring, self._pending = False, None

    def deleteEntriesFrom(self, entry_from) -> None:  # noqa: N802 (pysyncobj's names)
        if self._deferring:
            self._pending = entry_from if self._pending is None else min(self._pending, entry_from)
        else:
            self._inner.deleteEntriesFrom(entry_from)

    def add(self, command, idx, term) -> None:
        if self._pending is not None:
            pos = idx - self._inner[0][1]
            if pos < len(self._inner) and self._inner[pos][1] == idx and self._inner[pos][2] == term:
                return  # already held: the same entry
            self._inner.deleteEntriesFrom(max(pos, self._pending))  # the first conflict: drop it and what follows
            self._pending = None
        self._inner.add(command, idx, term)


def guard_append_entries(sync: SyncObj) -> ConflictOnlyTruncation:
    """Installs ``ConflictOnlyTruncation`` on a SyncObj (before its first tick): wraps its journal and the
    transport's message callback."""
    journal = ConflictOnlyTruncation(sync._SyncObj__raftLog)
    sync._SyncObj__raftLog = journal
    handle = sync._SyncObj__onMessageReceived

    def on_message(peer, message):
        if not (isinstance(message, dict) and message.get("type") == "append_entries" and "prevLogIdx" in message):
            return handle(peer, message)
        entries = message.get("entries") or []
        last_new = entries[-1][1] if entries else message["prevLogIdx"]
        if message.get("transmission") == "finish":
            last_new = message["prevLogIdx"] + 1
        if message.get("commit_index", 0) > last_new:
            message = {**message, "commit_index": last_new}
        journal.begin()
        try:
            return handle(peer, message)
        finally:
            journal.end()

    sync._SyncObj__transport.setOnMessageReceivedCallback(on_message)
    return journal


class _SecretCheckingEncryptor:
    """pysyncobj's encryptor (Fernet, from the cluster secret), saying so when a Raft message does not decrypt:
    pysyncobj drops such a connection without a word, so a controller given another secret than its peers (or
    none) would only show ``peers_connected`` 0. One warning a minute at most."""

    WARN_EVERY_S = 60.0

    def __init__(self, inner, node_id: int) -> None:
        self._inner = inner
        self._node_id = node_id
        self._warned_at: float | None = None

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def encrypt_at_time(self, data, current_time):
        return self._inner.encrypt_at_time(data, current_time)

    def extract_timestamp(self, data):
        return self._checked(self._inner.extract_timestamp, data)

    def decrypt(self, data, *args):
        return self._checked(self._inner.decrypt, data, *args)

    def _checked(self, call, *args):
        try:
            return call(*args)
        except Exception:
            now = time.monotonic()
            if self._warned_at is None or now - self._warned_at >= self.WARN_EVERY_S:
                self._warned_at = now
                logger.warning("controller %d: a Raft message did not decrypt with this controller's secret "
                               "(--password-file): a peer was given another secret, or none", self._node_id)
            raise


class ReplicatedMetadata(SyncObjConsumer):
    """The state machine as pysyncobj sees it: one replicated method, ``apply``. pysyncobj snapshots the
    attributes set after ``SyncObjConsumer.__init__`` (the metadata), not the lock made before it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)  # notified when ``version`` moves (metadata long polls)
        super().__init__()
        self.metadata = ClusterMetadata()
        # counts the applied commands a broker must see: every one but a heartbeat that changed no fencing, which
        # only moves the broker's last heartbeat (a long poll woken by every heartbeat would send the whole
        # metadata to every broker several times a second for nothing)
        self.version = 0

    @replicated
    def apply(self, command: c.Command) -> Result:
        with self.lock:
            fenced = self._fenced(command)
            try:
                result = self.metadata.apply(command)
            except Exception as exc:  # a bug, not bad input (from_dict checks shapes): the same on every node
                logger.exception("applying %r failed", command)
                return Result("UNKNOWN_SERVER_ERROR", f"{type(exc).__name__}: {exc}")
            if result.ok and (not isinstance(command, c.BrokerHeartbeat) or self._fenced(command) != fenced):
                self.version += 1
                self.changed.notify_all()
            return result

    def _fenced(self, command) -> bool | None:
        broker = self.metadata.brokers.get(getattr(command, "broker_id", None))
        return broker.fenced if broker is not None else None

    def read(self, fn):
        with self.lock:
            return fn(self.metadata)

    def read_changed(self, since: int | None, timeout_s: float, fn):
        """``fn(metadata)`` and the version, once the version is not ``since`` or ``timeout_s`` has passed."""
        with self.lock:
            if since is not None:
                self.changed.wait_for(lambda: self.version != since, timeout_s)
            return fn(self.metadata), self.version


def complete(data: dict, now_ms: int, rng: random.Random, session_timeout_ms: int) -> dict:
    """Fills in what the proposer decides for a command given over the endpoint: the time, the session timeout
    a registration is judged by, and a new topic's id and the placer's random start and shift."""
    data = dict(data)
    name = data.get("command")
    if name == "RegisterBroker":
        data["session_timeout_ms"] = session_timeout_ms  # the controller's, as Kafka's: a broker does not pick it
    if name in ("RegisterBroker", "BrokerHeartbeat", "FenceStaleBrokers") and data.get("now_ms") is None:
        data["now_ms"] = now_ms
    if name == "CreateTopic":
        data.setdefault("topic_id", str(uuid.UUID(int=rng.getrandbits(128), version=4)))
    if name in ("CreateTopic", "CreatePartitions"):
        data.setdefault("start_index", rng.randrange(1 << 16))
        data.setdefault("shift", rng.randrange(1 << 16))
    return data


class Controller:
    """One controller node. ``start()`` joins the Raft group and opens the endpoint; ``stop()`` leaves."""

    def __init__(
        self,
        node_id: int,
        voters: list[Voter],
        listen: tuple[str, int] | None = None,
        data_dir: str | None = None,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        command_timeout_s: float = 10.0,
        leader_balance: LeaderBalance | None = None,
        password: str | None = None,
        endpoint_auth: bool = False,
    ) -> None:
        """``password``: the cluster secret (``auth.read_password_file``); every voter must be given the same one.
        pysyncobj then encrypts and authenticates every Raft message with a key derived from it (Fernet: AES
        and an HMAC) and drops a connection whose first message does not decrypt, before unpickling anything;
        without it the Raft port unpickles whatever reaches it. ``endpoint_auth``: a connection to the JSON
        endpoint proves the same secret before its first request (``auth``'s challenge-response)."""
        if endpoint_auth and not password:
            raise ValueError("endpoint authentication needs the cluster secret (--password-file)")
        by_id = {v.node_id: v for v in voters}
        if node_id not in by_id:
            raise ValueError(f"node id {node_id} is not among the voters {sorted(by_id)}")
        self.node_id = node_id
        self.voters = voters
        self._by_address = {v.address: v.node_id for v in voters}
        self.session_timeout_ms = session_timeout_ms
        self.command_timeout_s = command_timeout_s
        self.leader_balance = leader_balance or LeaderBalance()
        self._balanced_at = 0.0  # when the leaders were last checked (auto.leader.rebalance.enable)
        self.state = ReplicatedMetadata()
        # appendEntriesUseBatch=False: a command goes to the followers at once, not on the next append-entries
        # period (100 ms): metadata changes are few, each one's latency is what brokers wait on
        # connectionRetryTime 1 s (5 s by default): a restarted node is reconnected to within a second; until
        # then the two others lack the link that a failover right after the restart needs
        conf = SyncObjConf(
            dynamicMembershipChange=False, commandsWaitLeader=True, appendEntriesUseBatch=False,
            connectionRetryTime=1.0, password=password or None,
        )
        self.raft_encrypted = bool(password)
        self._password = password
        self.endpoint_auth = endpoint_auth
        if data_dir:
            os.makedirs(data_dir, exist_ok=True)
            conf.journalFile = os.path.join(data_dir, "raft.journal")
            conf.fullDumpFile = os.path.join(data_dir, "raft.snapshot")
        conf.autoTick = False  # ticked by our thread, started once the journal is made durable
        self._conf = conf
        self._self = by_id[node_id].address
        self._others = [v.address for v in voters if v.node_id != node_id]
        self._sync: SyncObj | None = None
        self._listen = listen
        self._server: socketserver.ThreadingTCPServer | None = None
        self._stopping = threading.Event()
        self._rng = random.Random()
        self._leading_since: float | None = None
        self._announced_term: int | None = None

    # -- life ----------------------------------------------------------------------------------------------
    def start(self) -> "Controller":
        self._sync = SyncObj(self._self, self._others, conf=self._conf, consumers=[self.state])
        if self._sync._SyncObj__encryptor is not None:  # before the first tick opens a connection
            self._sync._SyncObj__encryptor = _SecretCheckingEncryptor(self._sync._SyncObj__encryptor, self.node_id)
        if self._conf.journalFile:
            self._sync._SyncObj__raftLog = DurableJournal(self._sync._SyncObj__raftLog, self._conf.fullDumpFile)
        guard_append_entries(self._sync)
        self._ticker = threading.Thread(target=self._tick, name="controller-raft", daemon=True)
        self._ticker.start()
        threading.Thread(target=self._duties, name="controller-duties", daemon=True).start()
        if self._listen:
            self._server = _Server(self._listen, _Handler, controller=self)
            threading.Thread(target=self._server.serve_forever, name="controller-endpoint", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._sync is not None:
            self._ticker.join()
            self._sync.destroy()

    @property
    def endpoint(self) -> tuple[str, int] | None:
        return self._server.server_address[:2] if self._server else None

    def _tick(self) -> None:
        while not self._stopping.is_set():
            try:
                self._sync.doTick(self._conf.autoTickPeriod)
                self._announce()
            except Exception:  # as pysyncobj's own tick thread does: log, wait a little, go on
                logger.exception("controller %d: Raft tick failed", self.node_id)
                self._stopping.wait(self._conf.autoTickPeriod)

    # -- who leads -----------------------------------------------------------------------------------------
    def controller_id(self) -> int:
        """The active controller's node id as this node knows it, -1 when it knows of none."""
        leader = self._sync._getLeader() if self._sync else None
        return self._by_address.get(getattr(leader, "address", None) or str(leader or ""), -1)

    def is_active(self) -> bool:
        """This node leads the Raft group and has applied its own LeaderChange: the metadata it holds has every
        command of the terms before its own (a leader fresh from a restart may not have applied them yet)."""
        if self._sync is None or not self._sync._isLeader():
            return False
        term = self._sync._getTerm()
        return self.state.read(lambda m: (m.controller_id, m.controller_epoch)) == (self.node_id, term)

    def _announce(self) -> None:
        """A leader in a term it has not announced proposes its LeaderChange (asynchronously: this runs in the
        tick thread, which must go on ticking for the command to commit); a failed proposal is tried again."""
        if not self._sync._isLeader():
            return
        term = self._sync._getTerm()
        if self._announced_term == term:
            return
        self._announced_term = term

        def done(result, error):
            if error != FAIL_REASON.SUCCESS and self._announced_term == term:
                self._announced_term = None

        self.state.apply(c.LeaderChange(self.node_id, term), callback=done)

    # -- writing and reading -------------------------------------------------------------------------------
    def propose(self, command: c.Command) -> Result:
        """Replicates ``command`` through the active controller and answers its result once this node applied
        it; NOT_CONTROLLER when no leader could take it, REQUEST_TIMED_OUT when it did not commit in time."""
        done = threading.Event()
        answer: list[Any] = [None, None]

        def callback(result, error):
            answer[0], answer[1] = result, error
            done.set()

        self.state.apply(command, callback=callback)
        if not done.wait(self.command_timeout_s):
            return Result("REQUEST_TIMED_OUT", f"not committed within {self.command_timeout_s} s")
        result, error = answer
        if error != FAIL_REASON.SUCCESS:
            return Result("NOT_CONTROLLER", f"no active controller took the command (pysyncobj reason {error})")
        return result

    def propose_dict(self, data: dict) -> Result:
        if data.get("command") == "LeaderChange":
            return Result("INVALID_REQUEST", "LeaderChange is written by a new active controller, not by a client")
        try:
            now_ms = int(time.time() * 1000)
            command = c.from_dict(complete(data, now_ms, self._rng, self.session_timeout_ms))
        except ValueError as exc:
            return Result("INVALID_REQUEST", str(exc))
        return self.propose(command)

    def metadata(self, since: int | None = None, wait_ms: int = 0) -> dict:
        """The metadata snapshot with its ``version``; given the ``since`` version a broker last saw, it waits up
        to ``wait_ms`` (30 s at most) for a newer one (a long poll: brokers learn of a change at once)."""
        timeout_s = min(max(wait_ms, 0), 30_000) / 1000
        snapshot, version = self.state.read_changed(since, timeout_s, ClusterMetadata.snapshot)
        snapshot["version"] = version  # controller_id: the last active controller's LeaderChange, as applied here
        snapshot["node_id"] = self.node_id
        return snapshot

    def close_session(self, broker_id: int, broker_epoch: int) -> None:
        """A broker's session connection to this node closed: fence it now (CloseBrokerSession), unless this
        node is stopping (then the connection closed because of us, not the broker)."""
        if self._stopping.is_set():
            return
        result = self.propose(c.CloseBrokerSession(broker_id, broker_epoch))
        logger.info("broker %d's session closed: %s", broker_id, result.error if not result.ok else "fenced")

    def status(self) -> dict:
        status = self._sync.getStatus() if self._sync else {}
        return {
            "node_id": self.node_id,
            "controller_id": self.controller_id(),
            "active": self.is_active(),
            "ready": bool(self._sync and self._sync.isReady()),
            "raft_term": status.get("raft_term"),
            "commit_idx": status.get("commit_idx"),
            "last_applied": status.get("last_applied"),
            "has_quorum": status.get("has_quorum"),
            "raft_encrypted": self.raft_encrypted,
            "endpoint_auth": self.endpoint_auth,
            "peers_connected": sum(
                1 for key, value in status.items() if key.startswith("partner_node_status_server_") and value == 2
            ),
        }

    # -- the active controller's duties --------------------------------------------------------------------
    def _duties(self) -> None:
        period = max(self.session_timeout_ms / 4000, 0.05)
        while not self._stopping.wait(period):
            if not self.is_active():
                self._leading_since = None
                continue
            now = time.monotonic()
            if self._leading_since is None:
                self._leading_since = self._balanced_at = now
            if (now - self._leading_since) * 1000 < self.session_timeout_ms:
                continue  # a new active controller gives every broker one whole session first
            now_ms = int(time.time() * 1000)
            stale = self.state.read(
                lambda m: [
                    b for b in m.brokers.values()
                    if not b.fenced and b.last_heartbeat_ms + self.session_timeout_ms < now_ms
                ]
            )
            if stale:
                self.propose(c.FenceStaleBrokers(now_ms, self.session_timeout_ms))
            self._balance_leaders(now)

    def _balance_leaders(self, now: float) -> None:
        """auto.leader.rebalance.enable: every leader.imbalance.check.interval.seconds, preferred elections for
        the partitions of brokers leading too few of their own (``placement.imbalanced_leaders``)."""
        balance = self.leader_balance
        if not balance.enabled or now - self._balanced_at < balance.check_interval_s:
            return
        self._balanced_at = now
        for topic, index in self.state.read(lambda m: imbalanced_leaders(m, balance.per_broker_percentage)):
            result = self.propose(c.ElectLeaders(topic, index))
            logger.info("leader balance: preferred election of %s-%d: %s", topic, index, result.error)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, handler, controller: Controller):
        self.controller = controller
        super().__init__(address, handler)


class _Handshake:
    """One endpoint connection's authentication (``auth``): answers hello and auth, and every request before the
    connection proved the cluster secret (CLUSTER_AUTHORIZATION_FAILED: ``refused``, the connection closes).
    ``answer`` gives None for a request to serve."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.proven = not controller.endpoint_auth
        self.refused = False
        self._nonce: str | None = None

    def answer(self, line: bytes) -> dict | None:
        try:
            request = json.loads(line)
        except ValueError:
            request = None
        op = request.get("op") if isinstance(request, dict) else None
        if op == "hello":
            nonce = request.get("nonce")
            if not self.controller.endpoint_auth:
                return {"error": "NONE", "auth": False}
            if not (isinstance(nonce, str) and len(nonce) == auth.NONCE_HEX_CHARS):
                return Result("INVALID_REQUEST", f"hello needs a nonce of {auth.NONCE_HEX_CHARS} hex digits").to_dict()
            self._nonce = auth.new_nonce()
            return {"error": "NONE", "auth": True, "nonce": self._nonce,
                    "proof": auth.proof(self.controller._password, "controller", nonce)}
        if op == "auth" and self.controller.endpoint_auth:
            if self._nonce is not None and auth.proves(self.controller._password, "client", self._nonce,
                                                       request.get("proof")):
                self.proven = True
                return Result().to_dict()
            return self._refuse("the proof of the cluster secret is wrong (or no hello came first)")
        if self.proven:
            return None
        return self._refuse("this controller's endpoint needs the cluster secret: give the client the file "
                            f"${auth.PASSWORD_FILE_ENV} names")

    def _refuse(self, message: str) -> dict:
        self.refused = True
        logger.warning("endpoint connection refused: %s", message)
        return Result("CLUSTER_AUTHORIZATION_FAILED", message).to_dict()


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        """One connection. A broker's registration or heartbeat given with ``"session": true`` makes it that
        broker's session: when it closes (the broker died, kill -9 included, or stopped), the broker is fenced at
        once (CloseBrokerSession). Tools' connections, without it, fence nobody when they close."""
        controller: Controller = self.server.controller
        session: tuple[int, int] | None = None
        handshake = _Handshake(controller)
        try:
            for line in self.rfile:
                answer = handshake.answer(line)
                if answer is None:
                    answer, session = self._answer(controller, line, session)
                self.wfile.write(json.dumps(answer).encode() + b"\n")
                self.wfile.flush()
                if handshake.refused:
                    break
        except OSError:
            pass
        finally:
            if session is not None:
                controller.close_session(*session)

    @staticmethod
    def _answer(controller: "Controller", line: bytes, session):
        try:
            request = json.loads(line)
            op = request.get("op") if isinstance(request, dict) else None
            if op == "command" and isinstance(request.get("command"), dict):
                command = request["command"]
                result = controller.propose_dict(command).to_dict()
                if (request.get("session") is True and result["error"] == "NONE"
                        and command.get("command") in ("RegisterBroker", "BrokerHeartbeat")):
                    epoch = (result["value"] or {}).get("broker_epoch", command.get("broker_epoch"))
                    session = (command["broker_id"], epoch)
                return result, session
            if op == "metadata":
                since, wait_ms = request.get("since"), request.get("wait_ms", 0)
                if not (since is None or isinstance(since, int)) or not isinstance(wait_ms, int):
                    return Result("INVALID_REQUEST", "since and wait_ms must be integers").to_dict(), session
                return controller.metadata(since, wait_ms), session
            if op == "status":
                return controller.status(), session
            return Result("INVALID_REQUEST", "op must be command (with a command object), metadata or "
                          "status").to_dict(), session
        except ValueError as exc:
            return Result("INVALID_REQUEST", f"not JSON: {exc}").to_dict(), session
