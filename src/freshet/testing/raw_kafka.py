"""A bare Kafka-protocol connection for tests that must send what no well-behaved client sends:
garbage frames, replayed produce requests, unknown versions. Requests are kio entities."""

from __future__ import annotations

import io
import socket
import struct
import threading
import time

from kio.serial import entity_reader, entity_writer

from freshet.broker.protocol import build, request_schema, response_schema


class RawConnection:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._read_exactly(4))[0]
        return self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            out += chunk
        return bytes(out)

    def is_closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (ConnectionError, socket.timeout, OSError):
            return True

    def request(self, api_key: int, version: int, body: dict, expect_response: bool = True):
        """Send a request built from ``body`` (see protocol.build); return the decoded response."""
        schema = request_schema(api_key, version)
        self.correlation_id += 1
        buf = io.BytesIO()
        client_id = b"raw-test"
        buf.write(struct.pack(">hhih", api_key, version, self.correlation_id, len(client_id)) + client_id)
        if schema.__flexible__:
            buf.write(b"\0")
        entity_writer(schema)(buf, build(schema, body))
        self.send_frame(buf.getvalue())
        if not expect_response:
            return None
        frame = self.read_frame()
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        assert correlation_id == self.correlation_id
        pos = 4
        rschema = response_schema(api_key, version)
        if rschema.__flexible__ and api_key != 18:
            pos += 1
        result = entity_reader(rschema)(frame, pos)
        return result[0] if isinstance(result, tuple) else result.value


def produce(conn: RawConnection, topic: str, partition: int, records: bytes, acks: int = -1, version: int = 9):
    response = conn.request(0, version, {
        "transactional_id": None, "acks": acks, "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }, expect_response=acks != 0)
    if response is None:
        return None
    return response.responses[0].partition_responses[0]


def fetch(conn: RawConnection, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20, version: int = 11):
    response = conn.request(1, version, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": max_bytes, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                    "fetch_offset": offset, "log_start_offset": -1,
                                                    "partition_max_bytes": max_bytes}]}],
        "forgotten_topics_data": [], "rack_id": "",
    })
    return response.responses[0].partitions[0]


class SteadyClient(threading.Thread):
    """A well-behaved client beside a storm: produce a record, fetch it back, every 50 ms, until stopped.

    Reads what it wrote (a fuzzer's own old batches may be gone to retention). ``failures`` holds
    what went wrong; it stops at the first exception.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.requests = 0
        self.failures: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        from freshet.log import encode_batch

        with RawConnection(self.bootstrap) as conn:
            while not self.done.is_set():
                try:
                    written = produce(conn, self.topic, 0, encode_batch([(b"k", b"ok", int(time.time() * 1000))]))
                    read = fetch(conn, self.topic, 0, written.base_offset)
                    self.requests += 2
                    if written.error_code or read.error_code:
                        self.failures.append(f"produce error {written.error_code}, fetch error {read.error_code}")
                except Exception as exc:
                    self.failures.append(repr(exc))
                    return
                time.sleep(0.05)

    def stop(self) -> None:
        self.done.set()
        self.join(30)
