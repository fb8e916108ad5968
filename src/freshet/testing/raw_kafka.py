"""A bare Kafka-protocol connection for tests that must send what no well-behaved client sends:
garbage frames, replayed produce requests, unknown versions. Requests are kio entities."""

from __future__ import annotations

import io
import socket
import struct
import threading
import time

from kio.serial import entity_reader, entity_writer

from freshet.broker.wire.protocol import build, request_schema, response_schema
from freshet.format.framing import SIZE, read_response_header, request_header, size_prefixed
from freshet.format.record_batch import iter_batches


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
        self.sock.sendall(size_prefixed(payload))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        (size,) = SIZE.unpack(self._read_exactly(SIZE.size))
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

    def encode(self, api_key: int, version: int, body: dict) -> bytes:
        """The next request's payload (header and body, no size prefix), built from ``body`` (see
        protocol.build)."""
        schema = request_schema(api_key, version)
        self.correlation_id += 1
        buf = io.BytesIO()
        buf.write(request_header(api_key, version, self.correlation_id, b"raw-test", schema.__flexible__))
        entity_writer(schema)(buf, build(schema, body))
        return buf.getvalue()

    def request(self, api_key: int, version: int, body: dict, expect_response: bool = True):
        """Send a request built from ``body`` (see protocol.build); return the decoded response."""
        self.send_frame(self.encode(api_key, version, body))
        if not expect_response:
            return None
        frame = self.read_frame()
        rschema = response_schema(api_key, version)
        correlation_id, pos = read_response_header(frame, api_key, rschema.__flexible__)
        assert correlation_id == self.correlation_id
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


def fetch_body(topic: str, offsets: dict[int, int], partition_max_bytes: int, max_bytes: int, max_wait_ms: int = 0,
               min_bytes: int = 0) -> dict:
    """A Fetch request's body (see protocol.build) for ``offsets`` (partition -> offset) of one topic."""
    return {
        "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": o, "log_start_offset": -1,
             "partition_max_bytes": partition_max_bytes} for p, o in offsets.items()]}],
        "forgotten_topics_data": [], "rack_id": "",
    }


def fetch(conn: RawConnection, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20, version: int = 11):
    response = conn.request(1, version, fetch_body(topic, {partition: offset}, max_bytes, max_bytes))
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
        from freshet.format.record_batch import encode_batch

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


def fetch_request(conn: RawConnection, topic: str, offsets: dict[int, int], partition_max_bytes: int = 1 << 20,
                  max_bytes: int = 50 << 20, version: int = 11) -> bytes:
    """A whole Fetch frame (size prefix included) for ``offsets`` (partition -> offset), sized as librdkafka's
    defaults size them, for a caller that reads the response itself."""
    payload = conn.encode(1, version, fetch_body(topic, offsets, partition_max_bytes, max_bytes, max_wait_ms=500,
                                                 min_bytes=1))
    return size_prefixed(payload)


def pull_fetches(bootstrap: str, topic: str, partitions: int, count: int, partition_max_bytes: int = 1 << 20,
                 max_bytes: int = 50 << 20) -> dict:
    """The broker's fetch path alone: Fetch requests (v11, librdkafka's default sizes) sent one after another on
    one connection, as a consumer's fetcher does, each partition's next offset taken from the last whole batch's
    header, until ``count`` records have come back. The client reads each response into one buffer and looks at
    batch headers only (no record is decoded), so the time is the broker's answering and the socket's."""
    offsets = {p: 0 for p in range(partitions)}
    buffer = bytearray(max_bytes + (8 << 20))
    view = memoryview(buffer)
    latencies, records = [], 0
    with RawConnection(bootstrap) as conn:
        sock = conn.sock
        start = time.perf_counter()
        while records < count:
            frame = fetch_request(conn, topic, offsets, partition_max_bytes, max_bytes)
            sent = time.perf_counter()
            sock.sendall(frame)
            _receive_into(sock, view[:4])
            need = 4 + int.from_bytes(buffer[:4], "big")
            _receive_into(sock, view[4:need])
            latencies.append(time.perf_counter() - sent)
            found = _advance(view[8:need], offsets)  # past the size and the correlation id
            if not found and time.perf_counter() - start > 60:
                raise RuntimeError(f"only {records} of {count} records came back in 60 s")
            records += found
        seconds = time.perf_counter() - start
    if records != count:
        raise RuntimeError(f"read {records} records, expected {count}")
    latencies.sort()
    return {"records": records, "seconds": round(seconds, 3), "msgs_per_s": round(records / seconds),
            "fetches": len(latencies), "fetch_ms_median": round(latencies[len(latencies) // 2] * 1000, 2)}


def _receive_into(sock: socket.socket, view: memoryview) -> None:
    """Fill ``view`` from the socket (a preallocated buffer: a response of megabytes is not copied again)."""
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if not n:
            raise ConnectionError("connection closed by the broker")
        got += n


def _advance(frame: memoryview, offsets: dict[int, int]) -> int:
    """Records in a Fetch v11 response (after the correlation id); moves each partition's offset past its last
    whole batch."""
    pos = 4 + 2 + 4  # throttle_time, error_code, session_id
    (topics,) = struct.unpack_from(">i", frame, pos)
    pos += 4
    records = 0
    for _ in range(topics):
        (name_len,) = struct.unpack_from(">h", frame, pos)
        pos += 2 + name_len
        (count,) = struct.unpack_from(">i", frame, pos)
        pos += 4
        for _ in range(count):
            partition, error = struct.unpack_from(">ih", frame, pos)
            pos += 4 + 2 + 8 * 3  # high watermark, last stable offset, log start offset
            if error:
                raise RuntimeError(f"fetch of partition {partition}: error {error}")
            (aborted,) = struct.unpack_from(">i", frame, pos)
            pos += 4 + 16 * max(aborted, 0) + 4  # aborted transactions, preferred read replica
            (size,) = struct.unpack_from(">i", frame, pos)
            pos += 4
            end = pos + max(size, 0)
            for header, _ in iter_batches(frame[pos:end]):  # whole batches: a partial one is fetched again
                offsets[partition] = header.last_offset + 1
                records += header.records_count
            pos = end
    return records
