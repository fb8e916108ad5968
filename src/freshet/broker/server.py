"""The broker: an asyncio TCP server that speaks the Kafka protocol over the Freshet log.

Each connection reads frames in order and answers them in order (as Kafka does), but a
request that waits (acks=all produce, long-poll fetch) does not stop the next one from being
read: responses are queued as futures and written in request order.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import os
import signal
import socket
from typing import Awaitable, Callable

from freshet.format.errors import FrameError
from freshet.format.framing import API_VERSIONS_KEY, SIZE, RequestHeader, read_request_header
from freshet.log import FileRegion
from freshet.log.cleaner import clean

from .config import BrokerConfig
from .context import Connection, Handler, RequestContext
from .durability import GroupCommit
from .groups.classic import GroupCoordinator
from .groups.consumer import ConsumerGroupCoordinator
from .groups.offsets import OffsetStore
from .groups.share import ShareGroupCoordinator
from .metrics import MetricsServer
from .quotas import ClientQuotas
from .security.acls import Authorizer
from .security.credentials import CredentialStore
from .security.listeners import Listener, principal_of_certificate
from .security.sasl import FailedLogins, SaslSession
from .telemetry import TELEMETRY_KEYS, ClientTelemetry
from .topics.dynamic_config import DynamicBrokerConfigs
from .topics.registry import TopicRegistry
from .transactions import TransactionCoordinator
from .wire import protocol
from .wire.fetch_encoding import FIRST_VERSION as FETCH_FIRST, LAST_VERSION as FETCH_LAST, encode_fetch_body
from .wire.produce_encoding import (
    FIRST_VERSION as PRODUCE_FIRST,
    LAST_VERSION as PRODUCE_LAST,
    encode_produce_body,
)

log = logging.getLogger(__name__)

PRODUCE_KEY, FETCH_KEY = 0, 1
SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 17, 36
BEFORE_AUTHENTICATION = {API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY}


def encode(header: RequestHeader, body: dict) -> bytes | list:
    """A response frame: bytes, or for a fetch a list of buffers that leaves the record sets uncopied.
    Produce and Fetch, the most frequent, are packed directly; the rest go through kio's entities."""
    if header.api_key == PRODUCE_KEY and PRODUCE_FIRST <= header.api_version <= PRODUCE_LAST:
        return b"".join(protocol.frame_parts(header.api_key, header.api_version, header.correlation_id,
                                             [encode_produce_body(header.api_version, body)]))
    if header.api_key == FETCH_KEY and FETCH_FIRST <= header.api_version <= FETCH_LAST:
        return protocol.frame_parts(header.api_key, header.api_version, header.correlation_id,
                                    encode_fetch_body(header.api_version, body))
    return protocol.encode_response(header.api_key, header.api_version, header.correlation_id, body)


def _api_table() -> dict[int, tuple[int, int, Handler]]:
    from .handlers import (cluster, consumer_groups, fetch, groups, lifecycle, produce, quotas, reassignment,
                           security, share, share_state, telemetry, topics, transactions)

    table: dict[int, tuple[int, int, Handler]] = {}
    for module in (cluster, topics, produce, fetch, groups, consumer_groups, share, share_state, transactions,
                   security, telemetry, quotas, reassignment, lifecycle):
        table.update(module.APIS)
    return table


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        os.makedirs(config.data_dir, exist_ok=True)
        self.dynamic = DynamicBrokerConfigs(os.path.join(config.data_dir, "broker-configs.json"), config.node_id)
        self.registry = TopicRegistry(config.data_dir, self.dynamic.topic_defaults())
        self.group_commit: GroupCommit | None = None
        self.groups = GroupCoordinator(config.initial_rebalance_delay_ms)
        self.consumer_groups = ConsumerGroupCoordinator(  # a cluster's group configs are its metadata's
            self.registry, config.consumer_groups,
            None if config.controllers else os.path.join(config.data_dir, "consumer-group-configs.json"))
        self.telemetry = ClientTelemetry(config.telemetry_push_interval_ms)
        self.quotas = ClientQuotas(os.path.join(config.data_dir, "quotas.json"), config.producer_byte_rate)
        self.offsets = OffsetStore(self.registry)
        self.transactions = TransactionCoordinator(self)
        self.share_groups = ShareGroupCoordinator(self.registry, config.share, clustered=bool(config.controllers))
        self.apis = _api_table()
        if config.telemetry_push_interval_ms <= 0:
            # as Kafka, which offers telemetry only with a metrics plugin: clients are not asked to push (and
            # librdkafka does not log its new client instance id on every start)
            for key in TELEMETRY_KEYS:
                self.apis.pop(key, None)
        self.listeners = config.effective_listeners()
        security = config.security
        security_dir = os.path.join(config.data_dir, "security")
        self.credentials = CredentialStore(os.path.join(security_dir, "scram-credentials.json"))
        self.failed_logins = FailedLogins(security.max_failed_authentications)
        # ACLs are enforced with --authorizer, or by default once some listener authenticates its clients
        self.authorizer: Authorizer | None = None
        if security.authorizes(self.listeners):
            self.authorizer = Authorizer(os.path.join(security_dir, "acls.json"), set(security.super_users),
                                         security.allow_everyone_if_no_acl_found)
        elif security.super_users or security.allow_everyone_if_no_acl_found:
            log.warning("no authorizer (freshet broker start --authorizer): --super-user and "
                        "--allow-everyone-if-no-acl-found have no effect, every client may do everything")
        self.bound: dict[Listener, int] = {}  # listener -> the port it is bound to
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: dict[asyncio.Task, Connection] = {}
        self._cleaner: asyncio.Task | None = None
        self._watchdog: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()
        self.port = config.port
        self.cluster = None  # cluster mode: the ClusterMembership (its ``view`` is the cluster's metadata)
        self.replicas = None  # cluster mode: the ReplicaManager (leaders, followers, ISR)
        if config.controllers:
            self._join_cluster()
        self.metrics: MetricsServer | None = None
        if config.metrics_port is not None:
            self.metrics = MetricsServer(self.registry, config.host, config.metrics_port, self.telemetry, self.quotas)
            if self.cluster is not None:
                from .cluster.metrics import ClusterMetrics

                self.metrics.prometheus.register(ClusterMetrics(self))

    def _join_cluster(self) -> None:
        from .cluster import ClusterMembership

        self.cluster = ClusterMembership(self, self.config.controllers, self.config.node_id, self.config.rack,
                                         self.config.heartbeat_interval_ms)
        from .replication.manager import ReplicaManager

        self.replicas = ReplicaManager(self, self.config.node_id, self.cluster.alter_isr,
                                       self.config.replica_lag_time_max_ms)
        from .cluster.share_persister import SharePersister, led_epoch

        self.share_groups.persister = SharePersister(self)  # share-partitions' state through the share coordinator
        self.share_groups.led_epoch = functools.partial(led_epoch, self)

    @property
    def default_partitions(self) -> int:
        """num.partitions: set at run time (BROKER configs), else --default-partitions."""
        return int(self.dynamic.effective().get("num.partitions", self.config.default_partitions))

    @property
    def cleaner_interval_ms(self) -> int:
        """log.cleaner.backoff.ms: set at run time (BROKER configs), else --cleaner-interval-ms."""
        return int(self.dynamic.effective().get("log.cleaner.backoff.ms", self.config.cleaner_interval_ms))

    def alter_dynamic_configs(self, level: str, values: dict[str, str]) -> None:
        """Replace one level's dynamic configs (checked by the caller), persist them and apply them at once."""
        self.dynamic.replace(level, values)
        self.registry.set_defaults(self.dynamic.topic_defaults())
        for name in list(self.registry.topics):
            self.clean_soon(name)

    @property
    def advertised_host(self) -> str:
        return self.advertised(None)[0]

    async def start(self) -> None:
        self.group_commit = GroupCommit()
        self.group_commit.start()
        self.share_groups.on_append = self.group_commit.written
        self.groups.start()
        self.consumer_groups.start()
        self.share_groups.start()
        self.transactions.start()
        self._cleaner = asyncio.get_running_loop().create_task(self._run_cleaner(), name="log-cleaner")
        self._watchdog = asyncio.get_running_loop().create_task(self._expire_connections(), name="deadlines")
        if self.metrics:  # before the Kafka port: whoever sees that listening finds this too
            await self.metrics.start()
        for listener in self.listeners:
            context = self.config.security.server_context() if listener.tls else None
            server = await asyncio.start_server(
                functools.partial(self._serve, listener=listener), listener.host, listener.port, limit=1 << 20,
                reuse_address=True, ssl=context, ssl_handshake_timeout=self.config.frame_timeout_s if context else None,
                start_serving=self.cluster is None)  # a cluster's broker serves once it holds the metadata
            self._servers.append(server)
            self.bound[listener] = server.sockets[0].getsockname()[1]
            log.info("broker listening on %s (port %d), data in %s", listener, self.bound[listener],
                     self.config.data_dir)
        self.port = self.bound[self.listeners[0]]
        if self.cluster is not None:  # registered once its port is known; topics follow the metadata from here
            try:
                await self.cluster.start()
            except BaseException:
                await self.stop()
                raise
            self.registry.producer_ids = self.cluster.producer_ids
            for server in self._servers:
                await server.start_serving()

    def advertised(self, listener: Listener | None) -> tuple[str, int]:
        """The host and port a client of ``listener`` is told to connect to (the first listener's by default)."""
        listener = listener or self.listeners[0]
        host = self.config.advertised_host or (listener.host if listener.host not in ("0.0.0.0", "::")
                                               else self.config.host)
        return host, self.bound.get(listener, self.port)

    async def stop(self) -> None:
        if self.cluster is not None:  # the session closes first: fenced at once, leaderships move elsewhere
            await self.cluster.stop()
        if self.replicas is not None:
            await self.replicas.close()
        for server in self._servers:
            server.close()
        if self.metrics:
            await self.metrics.stop()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        # the cleaner, the read deadlines' watchdog and topic cleanings
        tasks = [t for t in (self._cleaner, self._watchdog, *self._background) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.groups.stop()
        await self.consumer_groups.stop()
        await self.share_groups.stop()
        await self.transactions.stop()
        if self.group_commit:
            await self.group_commit.stop()
        self.registry.close()  # fsyncs what is left

    def clean_soon(self, topic_name: str) -> None:
        """Retention and compaction for one topic now (its configs changed), not at the next cleaner round."""
        topic = self.registry.get(topic_name)
        if topic is None:
            return
        task = asyncio.get_running_loop().create_task(self._clean_topic(topic), name=f"clean-{topic_name}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _expire_connections(self) -> None:
        """Close connections idle past connections.max.idle.ms, and those whose request frame does not arrive
        whole within the frame timeout: every read sets its connection's deadline, checked here when the nearest
        comes. A read sets its deadline at least the shorter timeout ahead, so none set after a look comes sooner
        than that after it: the watchdog sleeps until the nearest deadline it saw, or the shorter timeout, not
        on a tick (an idle broker is not woken every second)."""
        loop = asyncio.get_running_loop()
        shortest = max(0.01, min(self.config.idle_timeout_s, self.config.frame_timeout_s))
        while True:
            now = loop.time()
            nearest = now + shortest
            for task, connection in list(self._connections.items()):
                deadline = connection.deadline
                if deadline is None:
                    continue
                if now > deadline:
                    connection.deadline = None
                    task.cancel()
                elif deadline < nearest:
                    nearest = deadline
            await asyncio.sleep(max(nearest - loop.time(), 0.01))

    async def _run_cleaner(self) -> None:
        """Retention and compaction, topic by topic, at the cleaner interval."""
        while True:
            await asyncio.sleep(self.cleaner_interval_ms / 1000)
            for topic in list(self.registry.topics.values()):
                await self._clean_topic(topic)

    async def _clean_topic(self, topic) -> None:
        """One cleaner pass over ``topic``, partition by partition, letting requests in between."""
        for partition in list(topic.partitions):
            if self.registry.get(topic.name) is not topic:
                return  # deleted meanwhile
            try:
                clean(partition)
            except Exception:
                log.exception("cleaning %s failed", partition.directory)
            await asyncio.sleep(0)

    # -- connections ----------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     listener: Listener | None = None) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        peer_host = f"/{peer[0]}" if peer else ""
        connection = Connection(listener or self.listeners[0], peer[0] if peer else "")
        self._connections[task] = connection
        if connection.listener.sasl:
            connection.sasl = SaslSession(self.credentials, self.config.security.sasl_mechanisms)
        if connection.listener.tls:
            connection.certificate_principal = principal_of_certificate(writer.get_extra_info("peercert"))
        queue: asyncio.Queue = asyncio.Queue(self.config.max_in_flight)
        sender = asyncio.create_task(self._send(queue, writer))
        loop = asyncio.get_running_loop()
        idle_timeout, frame_timeout = self.config.idle_timeout_s, self.config.frame_timeout_s
        try:
            # each read sets a deadline the watchdog (_expire_connections) enforces: a timer per read costs
            # more than the rest of a small request's reading
            while True:
                connection.deadline = loop.time() + idle_timeout
                size_bytes = await reader.readexactly(4)
                (size,) = SIZE.unpack(size_bytes)
                if size < 0 or size > self.config.max_request_bytes:
                    log.warning("closing %s: frame of %d bytes exceeds socket.request.max.bytes=%d",
                                peer, size, self.config.max_request_bytes)
                    break
                connection.deadline = loop.time() + frame_timeout
                frame = await reader.readexactly(size)
                connection.deadline = None
                header = read_request_header(frame)
                sasl = connection.sasl
                if sasl is not None and header.api_key not in BEFORE_AUTHENTICATION and (
                        not sasl.authenticated or sasl.expired()):
                    # as Kafka: a request before authentication, or after the session expired, closes the connection
                    log.info("closing %s: API key %d %s", peer, header.api_key,
                             "after its session expired" if sasl.authenticated else "before authentication")
                    break
                ctx = RequestContext(self, header, peer_host, connection=connection)
                response = self._dispatch(frame, ctx)
                if response is not None:
                    await queue.put(response)
                if connection.close_after_response:
                    break
                if ctx.throttle_ms:
                    await asyncio.sleep(ctx.throttle_ms / 1000)  # muted, as Kafka does over quota
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except FrameError as exc:
            log.debug("closing %s: %s", peer, exc)  # what Kafka does with a request it cannot parse
        except asyncio.CancelledError:
            pass
        finally:
            await queue.put(None)
            try:
                await asyncio.wait_for(sender, 5)
            except (asyncio.TimeoutError, asyncio.CancelledError, Exception):
                sender.cancel()
            writer.close()
            self._connections.pop(task, None)

    async def _send(self, queue: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            try:
                data = await item if not isinstance(item, (bytes, list)) else item
            except Exception:
                log.exception("request failed")
                writer.close()
                return
            if data is None:
                continue
            if isinstance(data, list):
                await self._write_parts(data, writer)
            else:
                writer.write(data)
            if writer.transport.get_write_buffer_size() > (1 << 20):
                await writer.drain()

    @staticmethod
    async def _write_parts(parts: list, writer: asyncio.StreamWriter) -> None:
        """Buffers are written; file regions (record sets) go from the page cache to the socket
        with sendfile: straight away while the socket takes them and nothing is queued before them,
        else through asyncio (which reads and writes them instead where it cannot sendfile, e.g. TLS)."""
        transport = writer.transport
        sock = transport.get_extra_info("socket")
        direct = sock is not None and transport.get_extra_info("ssl_object") is None
        loop = asyncio.get_running_loop()
        corked = False
        if direct and len(parts) > 2:
            # hold partial segments back while the pieces go out: one stream of full segments, not a
            # small packet for every header between the record sets
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
                corked = True
            except OSError:
                pass
        try:
            for part in parts:
                if not isinstance(part, FileRegion):
                    writer.write(part)
                    continue
                sent = 0
                if direct and transport.get_write_buffer_size() == 0 and not transport.is_closing():
                    try:
                        while sent < part.size:
                            n = os.sendfile(sock.fileno(), part.fd, part.position + sent, part.size - sent)
                            if n == 0:
                                break
                            sent += n
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:  # the peer went away: the connection is closing
                        transport.close()
                        return
                if sent < part.size:
                    await loop.sendfile(transport, part, part.position + sent, part.size - sent)
        finally:
            if corked:
                try:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
                except OSError:
                    pass
            for part in parts:
                if isinstance(part, FileRegion):
                    part.close()

    def _dispatch(self, frame: bytes, ctx: RequestContext) -> bytes | list | asyncio.Task | None:
        header = ctx.header
        entry = self.apis.get(header.api_key)
        if entry is None:
            raise FrameError(f"unknown API key {header.api_key}")
        low, high, handler = entry
        if not low <= header.api_version <= high:
            if header.api_key == API_VERSIONS_KEY:
                from .handlers.cluster import unsupported_api_versions

                return unsupported_api_versions(self, header)
            raise FrameError(f"API key {header.api_key} version {header.api_version} is not supported")
        request = protocol.decode_request(frame, header)
        try:
            body = handler(ctx, request)
        except Exception as exc:
            log.exception("handler for API key %d failed", header.api_key)
            raise FrameError(f"internal error: {exc}") from exc
        if body is None:
            return None
        if isinstance(body, dict):
            return encode(header, body)
        return asyncio.ensure_future(self._finish(header, body))

    async def _finish(self, header: RequestHeader, pending: Awaitable[dict | None]) -> bytes | list | None:
        body = await pending
        if body is None:
            return None
        return encode(header, body)


async def run_broker(config: BrokerConfig, ready: Callable[[Broker], None] | None = None) -> None:
    """Start a broker and serve until SIGINT or SIGTERM."""
    broker = Broker(config)
    await broker.start()
    # what startup made (modules, the log's recovered state) lives as long as the broker: frozen, the cycle
    # collector's full collections stop rescanning it while requests make their short-lived objects
    gc.freeze()
    if ready:
        ready(broker)
    stop = asyncio.Event()
    if broker.cluster is not None:
        broker.cluster.on_fatal = lambda reason: stop.set()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await broker.stop()
