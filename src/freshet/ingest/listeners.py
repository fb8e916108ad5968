"""Syslog and StatsD listeners: UDP (a thread each, reading datagrams as fast as the socket gives them) and
syslog over TCP (asyncio, RFC 6587 framing). Each turns what it reads into JSON records for the buffer."""

from __future__ import annotations

import asyncio
import select
import socket
import threading
import time

import orjson

from . import statsd, syslog
from .buffer import EndpointStats, LogBuffer, RoomCheck

UDP_RECEIVE_BUFFER = 64 * 1024 * 1024  # asked of the kernel: bursts wait here instead of being dropped
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)  # Linux's number; Python does not name it


class UdpListener:
    """Reads datagrams on ``host:port`` in a thread of its own and hands each to ``handle(data, address)``.
    The kernel drops what arrives while the socket buffer is full; ``kernel_drops`` reads its count."""

    def __init__(self, host: str, port: int, handle, name: str, stats: EndpointStats) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        for option in (SO_RCVBUFFORCE, socket.SO_RCVBUF):  # FORCE: past net.core.rmem_max, when root
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, option, UDP_RECEIVE_BUFFER)
                break
            except OSError:
                continue
        self.sock.bind((host, port))
        self.sock.setblocking(False)  # read until the queue is empty, wait in select only then
        self.port = self.sock.getsockname()[1]
        self.handle = handle
        self.stats = stats  # kernel_drops goes to stats.extra when read
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    def start(self) -> UdpListener:
        self._thread.start()
        return self

    def _run(self) -> None:
        recv, handle, stop = self.sock.recvfrom, self.handle, self._stop
        while not stop.is_set():
            try:
                while True:
                    data, address = recv(65535)
                    handle(data, address)
            except BlockingIOError:
                select.select([self.sock], [], [], 0.2)
            except OSError:
                if stop.is_set():
                    return

    def kernel_drops(self) -> int | None:
        """Datagrams the kernel dropped for this socket (Linux /proc/net/udp), None where unknown."""
        inode = _socket_inode(self.sock)
        for path in ("/proc/net/udp", "/proc/net/udp6"):
            try:
                with open(path) as f:
                    next(f)
                    for line in f:
                        fields = line.split()
                        if len(fields) >= 13 and fields[9] == inode:
                            return int(fields[12])
            except OSError:
                continue
        return None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


def _socket_inode(sock: socket.socket) -> str | None:
    import os

    try:
        target = os.readlink(f"/proc/self/fd/{sock.fileno()}")
    except OSError:
        return None
    return target.removeprefix("socket:[").removesuffix("]")


class SyslogSink:
    """Syslog messages into ``topic``: one JSON record each (``syslog.parse`` plus the sender's address),
    keyed by hostname so a host's lines stay in order, stamped with the message's own time when it has one."""

    def __init__(self, buffer: LogBuffer, stats: EndpointStats, topic: str) -> None:
        self.buffer = buffer
        self.stats = stats
        self.topic = topic
        self.has_room = RoomCheck(buffer)

    def offer(self, data: bytes, source: str) -> bool:
        """Buffer one message; False (and counted dropped) when the buffer is full."""
        buffer, stats = self.buffer, self.stats
        if not self.has_room():
            stats.dropped += 1
            return False
        now = int(time.time() * 1000)
        event = syslog.parse(data.decode("utf-8", "replace"), now)
        event["source"] = source
        if event["format"] == "unparsed":
            stats.malformed += 1
        key = (event["hostname"] or source).encode()
        try:
            buffer.produce(stats, self.topic, orjson.dumps(event), key, timestamp_ms=event["timestamp_ms"] or now)
        except BufferError:
            stats.dropped += 1
            return False
        return True

    def datagram(self, data: bytes, address) -> None:
        self.offer(data, address[0])


class StatsdSink:
    """StatsD lines into ``topic``: one JSON record per metric, keyed by metric name; bad lines counted."""

    def __init__(self, buffer: LogBuffer, stats: EndpointStats, topic: str) -> None:
        self.buffer = buffer
        self.stats = stats
        self.topic = topic
        self.has_room = RoomCheck(buffer)

    def datagram(self, data: bytes, address) -> None:
        buffer, stats = self.buffer, self.stats
        now = int(time.time() * 1000)
        metrics, bad = statsd.parse_datagram(data, now)
        stats.malformed += bad
        for metric in metrics:
            if not self.has_room():
                stats.dropped += 1
                continue
            try:
                buffer.produce(stats, self.topic, orjson.dumps(metric), metric["name"].encode(), timestamp_ms=now)
            except BufferError:
                stats.dropped += 1


class SyslogTcpServer:
    """Syslog over TCP (RFC 6587, octet counting or one message per line). Policy ``block`` stops reading a
    connection while the buffer is full, so the sender waits (TCP flow control); ``drop`` drops and counts."""

    def __init__(self, sink: SyslogSink, host: str, port: int, max_message_bytes: int = 64 * 1024) -> None:
        self.sink = sink
        self.host = host
        self.port = port
        self.max_message_bytes = max_message_bytes
        self.server: asyncio.base_events.Server | None = None
        self.connections = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, self.host, self.port, limit=1 << 20)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sink, buffer = self.sink, self.sink.buffer
        framer = syslog.TcpFramer(self.max_message_bytes)
        peer = (writer.get_extra_info("peername") or ("",))[0]
        self.connections += 1
        sink.stats.extra["connections"] = self.connections
        try:
            while data := await reader.read(1 << 16):
                before = framer.oversized
                for message in framer.feed(data):
                    if sink.stats.policy == "block":
                        while not buffer.has_room():
                            await asyncio.sleep(0.01)  # not reading: the sender's window fills, it waits
                    sink.offer(message, peer)
                sink.stats.malformed += framer.oversized - before
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.connections -= 1
            sink.stats.extra["connections"] = self.connections
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
