"""``freshet ingest serve``: one process with every endpoint (HTTP, syslog UDP and TCP, StatsD UDP) in front
of one bounded buffer, announcing its counters to ``__freshet_ingest`` for the dashboard."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
import time
from dataclasses import dataclass, field

import uvicorn
from confluent_kafka import Producer

from freshet.client import ClientError, TopicAdmin, producer_config
from freshet.client.ingest_registry import INGEST_TOPIC, ensure_ingest_topic, ingest_record

from .buffer import LogBuffer
from .http_app import HttpSettings, create_app
from .listeners import StatsdSink, SyslogSink, SyslogTcpServer, UdpListener

ANNOUNCE_EVERY_S = 2.0
GC_YOUNG_THRESHOLD = 20_000  # objects allocated and not yet freed before a young-generation collection (700)


@dataclass
class IngestSettings:
    bootstrap: str
    host: str = "127.0.0.1"
    http_port: int = 8082
    syslog_udp_port: int | None = None
    syslog_tcp_port: int | None = None
    statsd_port: int | None = None
    syslog_topic: str = "syslog"
    statsd_topic: str = "metrics"
    create_topics: bool = True  # the syslog and StatsD topics, if missing (HTTP topics must exist)
    topic_partitions: int = 3
    max_buffered: int = 100_000
    syslog_tcp_policy: str = "block"  # or drop
    http: HttpSettings = field(default_factory=HttpSettings)
    name: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")


class IngestServer:
    def __init__(self, settings: IngestSettings) -> None:
        self.settings = settings
        self.buffer: LogBuffer | None = None
        self._udp: list[UdpListener] = []
        self._tcp: SyslogTcpServer | None = None
        self._uvicorn: uvicorn.Server | None = None
        self.addresses: dict[str, str] = {}

    def run(self) -> int:
        """Serve until SIGINT/SIGTERM; the number of records left unacknowledged at the end."""
        # what startup made (modules, the app) is never garbage: keep the collector from scanning it again
        # each time the requests' short-lived objects trigger a full collection (v3 produce 91k -> 104-129k
        # records/s, measured)
        gc.freeze()
        # a young-generation collection after every 700 objects that outlive their statement scanned the
        # records in flight (parsed, handed over, awaiting their delivery reports) again and again: 8.6% of the
        # keyed v2 load's samples (py-spy --native --gil), mostly in orjson.loads. The requests' own objects are
        # freed by reference counting; the collector is left for the cycles they leave behind.
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
        try:
            import uvloop

            return uvloop.run(self.serve())
        except ImportError:
            return asyncio.run(self.serve())

    async def serve(self) -> int:
        s = self.settings
        admin = TopicAdmin(s.bootstrap)
        existing = await asyncio.to_thread(admin.list_topics)  # also: the log is reachable, or ClientError
        if s.create_topics:
            for port, topic in ((s.syslog_udp_port or s.syslog_tcp_port, s.syslog_topic),
                                (s.statsd_port, s.statsd_topic)):
                if port is not None:
                    await asyncio.to_thread(admin.ensure_topic, topic, s.topic_partitions, None, existing)
        await asyncio.to_thread(ensure_ingest_topic, s.bootstrap)
        with _listening("HTTP", s.host, s.http_port):  # bound here, so a busy port is one clear error
            http_socket = socket.socket(socket.AF_INET6 if ":" in s.host else socket.AF_INET, socket.SOCK_STREAM)
            http_socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            http_socket.bind((s.host, s.http_port))
        buffer = self.buffer = LogBuffer(s.bootstrap, s.max_buffered)
        # announcements go by a producer of their own: they are not the senders' records, nor in the bound
        self._announcer = Producer(producer_config(s.bootstrap, {"log_level": 0, "message.timeout.ms": 10_000}))
        http_address = f"http://{s.host}:{s.http_port}"
        app = create_app(buffer, s.http, http_address)
        self.addresses["http"] = http_address
        if s.syslog_udp_port is not None or s.syslog_tcp_port is not None:
            if s.syslog_udp_port is not None:
                stats = buffer.endpoint("syslog-udp", "syslog", f"udp://{s.host}:{s.syslog_udp_port}",
                                        s.syslog_topic, "drop", own_producer=True)
                sink = SyslogSink(buffer, stats, s.syslog_topic)
                with _listening("syslog UDP", s.host, s.syslog_udp_port):
                    listener = UdpListener(s.host, s.syslog_udp_port, sink.datagram, "syslog-udp", stats)
                self._udp.append(listener.start())
                self.addresses["syslog-udp"] = stats.address
            if s.syslog_tcp_port is not None:
                stats = buffer.endpoint("syslog-tcp", "syslog", f"tcp://{s.host}:{s.syslog_tcp_port}",
                                        s.syslog_topic, s.syslog_tcp_policy, own_producer=True)
                self._tcp = SyslogTcpServer(SyslogSink(buffer, stats, s.syslog_topic), s.host, s.syslog_tcp_port)
                with _listening("syslog TCP", s.host, s.syslog_tcp_port):
                    await self._tcp.start()
                self.addresses["syslog-tcp"] = stats.address
        if s.statsd_port is not None:
            stats = buffer.endpoint("statsd", "statsd", f"udp://{s.host}:{s.statsd_port}", s.statsd_topic, "drop", own_producer=True)
            sink = StatsdSink(buffer, stats, s.statsd_topic)
            with _listening("StatsD UDP", s.host, s.statsd_port):
                listener = UdpListener(s.host, s.statsd_port, sink.datagram, "statsd-udp", stats)
            self._udp.append(listener.start())
            self.addresses["statsd"] = stats.address
        config = uvicorn.Config(app.state.produce_paths(), host=s.host, port=s.http_port, log_level="warning", access_log=False,
                                lifespan="off", http="httptools" if _has("httptools") else "h11",
                                loop="none", timeout_keep_alive=30)
        self._uvicorn = uvicorn.Server(config)
        # uvicorn re-raises a caught SIGTERM once it has stopped, which would kill this process before the
        # buffer is flushed: the signals are this server's to handle
        self._uvicorn.capture_signals = contextlib.nullcontext
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(signum, self.stop)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread (tests run the server in a thread): stop() it instead
        announcer = asyncio.create_task(self._announce())
        reports = asyncio.create_task(buffer.serve_reports())
        try:
            await self._uvicorn.serve(sockets=[http_socket])
        finally:
            announcer.cancel()
            reports.cancel()
            for listener in self._udp:
                listener.stop()
            if self._tcp is not None:
                try:
                    await asyncio.wait_for(self._tcp.stop(), 2)
                except TimeoutError:
                    pass
            self._announcer.produce(INGEST_TOPIC, None, ingest_record(s.name, None)[0])  # gone: a tombstone
            left = await asyncio.to_thread(buffer.close, 10.0)
            await asyncio.to_thread(self._announcer.flush, 5.0)
        return left

    def stop(self) -> None:
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True

    def stats(self) -> dict:
        for listener in self._udp:
            drops = listener.kernel_drops()
            if drops is not None:
                listener.stats.extra["kernel_drops"] = drops
        stats = self.buffer.stats()
        stats["updated_ms"] = int(time.time() * 1000)
        return stats

    async def _announce(self) -> None:
        while True:
            key, value = ingest_record(self.settings.name, self.stats())
            try:
                self._announcer.produce(INGEST_TOPIC, value, key)
                self._announcer.poll(0)
            except BufferError:
                pass
            await asyncio.sleep(ANNOUNCE_EVERY_S)


@contextlib.contextmanager
def _listening(what: str, host: str, port: int):
    try:
        yield
    except OSError as exc:
        raise ClientError(f"cannot listen for {what} on {host}:{port}: {exc.strerror or exc}") from None


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
