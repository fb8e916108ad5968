"""Mutation fuzzing of the Kafka request path.

A seed corpus holds a well-formed request for every API and version the broker advertises (real
record batches inside Produce), encoded with kio as clients encode them. Mutations: bit flips,
interesting bytes, truncation, extension, corrupted length fields, splices of two seeds.

``fuzz_decoder`` throws frames at the request decoder in-process: a frame may decode or raise
FrameError, nothing else. ``fuzz_live`` throws them at a broker over TCP while a well-behaved
client keeps working; the caller then checks the broker is alive and the canary data intact.
"""

from __future__ import annotations

import io
import random
import socket
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import crc32c
from kio.serial import entity_writer

from freshet.broker.wire import protocol
from freshet.format.errors import FormatError, FrameError
from freshet.format.framing import read_request_header, request_header, size_prefixed
from freshet.format.record_batch import (
    HEADER_SIZE,
    decode_records,
    encode_batch,
    scan_records,
    validate_batches,
)

INTERESTING = [0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE]
# DeleteTopics, DeleteRecords, DeleteGroups, OffsetDelete, share offsets, users, ACL and config changes,
# WriteTxnMarkers (commit / abort markers written into the partitions it names), AlterPartitionReassignments
# (moves the partitions it names), UnregisterBroker (removes a broker from the cluster), Initialize/Write/
# DeleteShareGroupState (replace or remove a share-partition's delivery state)
DESTRUCTIVE_APIS = {20, 21, 42, 47, 91, 92, 51, 30, 31, 33, 44, 27, 45, 64, 83, 85, 86}


def _seed_body(api_key: int, version: int) -> dict:
    batch = encode_batch([(b"key", b"value" * 10, 1_700_000_000_000), (None, b"v2", 1_700_000_000_001)])
    topic = "fuzz-target"
    bodies = {
        0: {"transactional_id": None, "acks": -1, "timeout": 1000,
            "topic_data": [{"name": topic, "topic_id": uuid.UUID(int=1), "partition_data": [
                {"index": 0, "records": batch}]}]},
        1: {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": topic, "topic_id": uuid.UUID(int=1), "partitions": [{"partition": 0,
                                                                                   "current_leader_epoch": -1,
                                                        "fetch_offset": 0, "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 20}]}]},
        2: {"replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                       "timestamp": -1}]}]},
        3: {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": True, "include_cluster_authorized_operations": True},
        8: {"group_id": "fuzz-group", "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "retention_time": -1,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
        9: {"group_id": "fuzz-group", "topics": None, "require_stable": False,
            "groups": [{"group_id": "fuzz-group", "member_id": None, "member_epoch": -1, "topics": None}]},
        10: {"key": "fuzz-group", "key_type": 0, "coordinator_keys": ["fuzz-group"]},
        11: {"group_id": "fuzz-group", "session_timeout": 6000, "rebalance_timeout": 6000, "member_id": "",
             "group_instance_id": None, "protocol_type": "consumer",
             "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"}],
             "reason": None},
        12: {"group_id": "fuzz-group", "generation_id": 1, "member_id": "m", "group_instance_id": None},
        13: {"group_id": "fuzz-group", "member_id": "m",
             "members": [{"member_id": "m", "group_instance_id": None, "reason": None}]},
        14: {"group_id": "fuzz-group", "generation_id": 1, "member_id": "m", "group_instance_id": None,
             "protocol_type": "consumer", "protocol_name": "range",
             "assignments": [{"member_id": "m", "assignment": b"\x00\x00"}]},
        15: {"groups": ["fuzz-group"], "include_authorized_operations": True},
        16: {"states_filter": [], "types_filter": []},
        18: {"client_software_name": "fuzz", "client_software_version": "1.0"},
        19: {"topics": [{"name": "fuzz-created", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                         "configs": [{"name": "retention.ms", "value": "1000"}]}],
             "timeout": 1000, "validate_only": True},
        20: {"topic_names": ["fuzz-doomed"], "topics": [{"name": "fuzz-doomed", "topic_id": None}], "timeout": 1000},
        21: {"topics": [{"name": "fuzz-doomed", "partitions": [{"partition_index": 0, "offset": 0}]}],
             "timeout": 1000},
        22: {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1},
        24: {"v3_and_below_transactional_id": "fuzz-txn", "v3_and_below_producer_id": 0,
             "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [{"name": topic, "partitions": [0]}]},
        25: {"transactional_id": "fuzz-txn", "producer_id": 0, "producer_epoch": 0, "group_id": "fuzz-group"},
        26: {"transactional_id": "fuzz-txn", "producer_id": 0, "producer_epoch": 0, "committed": False},
        28: {"transactional_id": "fuzz-txn", "group_id": "fuzz-group", "producer_id": 0, "producer_epoch": 0,
             "generation_id": -1, "member_id": "", "group_instance_id": None,
             "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
        32: {"resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": None}],
             "include_synonyms": False, "include_documentation": False},
        37: {"topics": [{"name": "fuzz-doomed", "count": 2, "assignments": None}], "timeout": 1000,
             "validate_only": True},
        42: {"groups_names": ["fuzz-doomed-group"]},
        47: {"group_id": "fuzz-doomed-group", "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]},
        60: {"include_cluster_authorized_operations": True, "endpoint_type": 1},
        61: {"topics": [{"name": topic, "partition_indexes": [0, 7]}]},
        35: {"topics": [{"topic": topic, "partitions": [0, 7]}, {"topic": "no-such-topic", "partitions": [0]}]},
        23: {"replica_id": -2, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0},
            {"partition": 7, "current_leader_epoch": 3, "leader_epoch": 1}]}]},
        75: {"topics": [{"name": topic}, {"name": "no-such-topic"}], "response_partition_limit": 1,
             "cursor": {"topic_name": topic, "partition_index": 0}},
        65: {"transactional_ids": ["fuzz-txn"]},
        66: {"state_filters": [], "producer_id_filters": [], "duration_filter": -1},
        44: {"resources": [{"resource_type": 32, "resource_name": "fuzz-share",
                            "configs": [{"name": "share.record.lock.duration.ms", "config_operation": 0,
                                         "value": "30000"}]}], "validate_only": True},
        76: {"group_id": "fuzz-share", "member_id": "fuzz-member", "member_epoch": 0, "rack_id": None,
             "subscribed_topic_names": [topic]},
        77: {"group_ids": ["fuzz-share"], "include_authorized_operations": True},
        68: {"group_id": "fuzz-consumer", "member_id": "fuzz-member", "member_epoch": 0, "instance_id": None,
             "rack_id": None, "rebalance_timeout": 30000, "subscribed_topic_names": [topic],
             "subscribed_topic_regex": None, "server_assignor": "uniform", "topic_partitions": []},
        69: {"group_ids": ["fuzz-consumer", "fuzz-group"], "include_authorized_operations": True},
        48: {"components": [{"entity_type": "user", "match_type": 2, "match": None}], "strict": False},
        49: {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "fuzz-client"}],
                          "ops": [{"key": "producer_byte_rate", "value": 1e9, "remove": False}]}],
             "validate_only": True},
        71: {"client_instance_id": uuid.UUID(int=0)},
        72: {"client_instance_id": uuid.UUID(int=7), "subscription_id": 1, "terminating": False,
             "compression_type": 0, "metrics": b"\x0a\x00"},
        78: {"group_id": "fuzz-share", "member_id": "fuzz-member", "share_session_epoch": 0, "max_wait": 0,
             "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
             "topics": [{"topic_id": uuid.UUID(int=1), "partitions": [
                 {"partition_index": 0, "acknowledgement_batches": [
                     {"first_offset": 0, "last_offset": 1, "acknowledge_types": [1]}]}]}],
             "forgotten_topics_data": []},
        79: {"group_id": "fuzz-share", "member_id": "fuzz-member", "share_session_epoch": 1,
             "topics": [{"topic_id": uuid.UUID(int=1), "partitions": [
                 {"partition_index": 0, "acknowledgement_batches": [
                     {"first_offset": 0, "last_offset": 1, "acknowledge_types": [1, 3]}]}]}]},
        33: {"resources": [{"resource_type": 2, "resource_name": topic, "configs": [
            {"name": "retention.ms", "value": "604800000"}]}], "validate_only": True},
        17: {"mechanism": "PLAIN"},
        36: {"auth_bytes": b"\0fuzz-user\0fuzz-password"},
        50: {"users": [{"name": "fuzz-user"}]},
        51: {"deletions": [{"name": "fuzz-doomed-user", "mechanism": 1}], "upsertions": [
            {"name": "fuzz-user", "mechanism": 2, "iterations": 4096, "salt": b"salt", "salted_password": b"x" * 64}]},
        29: {"resource_type_filter": 2, "resource_name_filter": None, "pattern_type_filter": 1,
             "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1},
        30: {"creations": [{"resource_type": 2, "resource_name": topic, "resource_pattern_type": 3,
                            "principal": "User:fuzz", "host": "*", "operation": 3, "permission_type": 3}]},
        31: {"filters": [{"resource_type_filter": 2, "resource_name_filter": "fuzz-doomed", "pattern_type_filter": 3,
                          "principal_filter": "User:fuzz", "host_filter": None, "operation": 1,
                          "permission_type": 1}]},
        90: {"groups": [{"group_id": "fuzz-share", "topics": [{"topic_name": topic, "partitions": [0]}]}]},
        91: {"group_id": "fuzz-doomed-share", "topics": [{"topic_name": topic, "partitions": [
            {"partition_index": 0, "start_offset": 0}]}]},
        92: {"group_id": "fuzz-doomed-share", "topics": [{"topic_name": topic}]},
        27: {"markers": [{"producer_id": 0, "producer_epoch": 0, "transaction_result": False,
                          "topics": [{"name": topic, "partition_indexes": [0]}], "coordinator_epoch": 0}]},
        43: {"election_type": 0, "topic_partitions": [{"topic": topic, "partitions": [0]}], "timeout": 1000},
        45: {"timeout": 1000, "allow_replication_factor_change": True,
             "topics": [{"name": topic, "partitions": [{"partition_index": 0, "replicas": [0]}]}]},
        46: {"timeout": 1000, "topics": [{"name": topic, "partition_indexes": [0]}]},
        64: {"broker_id": 99},
        # the share coordinator's APIs (KIP-932), on a share group of the fuzzer's own
        83: {"group_id": "fuzz-share-state", "topics": [{"topic_id": uuid.UUID(int=1), "partitions": [
            {"partition": 0, "state_epoch": 1, "start_offset": 0}]}]},
        84: {"group_id": "fuzz-share-state", "topics": [{"topic_id": uuid.UUID(int=1), "partitions": [
            {"partition": 0, "leader_epoch": 0}]}]},
        85: {"group_id": "fuzz-share-state", "topics": [{"topic_id": uuid.UUID(int=1), "partitions": [
            {"partition": 0, "state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "delivery_complete_count": -1,
             "state_batches": [{"first_offset": 0, "last_offset": 3, "delivery_state": 2, "delivery_count": 1},
                               {"first_offset": 4, "last_offset": 4, "delivery_state": 0, "delivery_count": 1}]}]}]},
        86: {"group_id": "fuzz-share-state", "topics": [{"topic_id": uuid.UUID(int=1),
                                                         "partitions": [{"partition": 0}]}]},
        87: {"group_id": "fuzz-share-state", "topics": [{"topic_id": uuid.UUID(int=1), "partitions": [
            {"partition": 0, "leader_epoch": 0}]}]},
    }
    return bodies[api_key]


def resealed(batch: bytes | bytearray) -> bytes:
    """``batch`` with its CRC-32C computed again over what follows it: a change inside the records that only the
    records' decoder can find."""
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def record_level_batches(timestamp_ms: int) -> dict[str, tuple[bytes, int]]:
    """Batches whose length, magic, counts and CRC-32C hold, so that only walking their records judges them (the
    produce path's scan_records on every topic): name -> (batch, the error code Kafka answers: INVALID_RECORD, as
    its record iterator refuses records that do not hold together)."""
    def one(header_key: str = "hdr-key", value: bytes = b"VVVV") -> bytes:
        return encode_batch([(b"k", value, timestamp_ms, ((header_key, b"hv"),))])

    def counted(batch: bytes, count: int) -> bytes:  # records_count and last offset delta made to say ``count``
        out = bytearray(batch)
        struct.pack_into(">i", out, 23, count - 1)
        struct.pack_into(">i", out, 57, count)
        return resealed(out)

    plain = one()
    two = encode_batch([(b"k", b"v", timestamp_ms), (b"k", b"w", timestamp_ms)])
    return {
        # Kafka decodes a header key with Java's UTF-8 decoder, which replaces what is not UTF-8: accepted
        "header key not UTF-8": (one("\udcff\udcfehdr"), 0),
        "header key of negative size": (resealed(plain.replace(b"\x0ehdr-key", b"\x01hdr-key")), 87),
        "value longer than its record": (resealed(plain.replace(b"\x08VVVV", b"\x0cVVVV")), 87),
        "header count past the record": (resealed(plain.replace(b"\x02\x0ehdr-key", b"\x06\x0ehdr-key")), 87),
        "key of negative size -2": (resealed(plain.replace(b"\x02k\x08VVVV", b"\x03k\x08VVVV")), 87),
        "offset delta out of sequence": (resealed(two.replace(b"\x00\x02\x02k\x02w", b"\x00\x04\x02k\x02w")), 87),
        "records_count below the records present": (counted(two, 1), 87),
        "records_count above the records present": (counted(two, 3), 87),
    }


def encode_request(api_key: int, version: int, body: dict, correlation_id: int = 1) -> bytes:
    """A request frame body (no size prefix), as a client would send it."""
    schema = protocol.request_schema(api_key, version)
    buf = io.BytesIO()
    buf.write(request_header(api_key, version, correlation_id, b"fuzzer", schema.__flexible__))
    entity_writer(schema)(buf, protocol.build(schema, body))
    return buf.getvalue()


# more requests of an API beside its _seed_body: CreateTopics and CreatePartitions with manual replica assignments
_MORE_SEED_BODIES = {
    # Produce with batches whose CRC-32C holds and whose records do not (refused INVALID_RECORD, nothing stored):
    # their mutations reach the walk over every produced record
    0: [{"transactional_id": None, "acks": -1, "timeout": 1000,
         "topic_data": [{"name": "fuzz-target", "topic_id": uuid.UUID(int=1), "partition_data": [
             {"index": 0, "records": batch}]}]}
        for batch, code in record_level_batches(1_700_000_000_000).values() if code],
    19: [{"topics": [{"name": "fuzz-assigned", "num_partitions": -1, "replication_factor": -1, "configs": [],
                      "assignments": [{"partition_index": 1, "broker_ids": [1]},
                                      {"partition_index": 0, "broker_ids": [1, 2]}]}],
          "timeout": 1000, "validate_only": True}],
    37: [{"topics": [{"name": "fuzz-target", "count": 3,
                      "assignments": [{"broker_ids": [1]}, {"broker_ids": [2, 1]}]}],
          "timeout": 1000, "validate_only": True}],
}


def seed_corpus(api_table: dict[int, tuple]) -> list[bytes]:
    seeds = []
    for key, (low, high, _) in sorted(api_table.items()):
        for version in range(low, high + 1):
            for body in [_seed_body(key, version), *_MORE_SEED_BODIES.get(key, ())]:
                seeds.append(encode_request(key, version, body))
    return seeds


def mutate(rng: random.Random, frame: bytes, corpus: list[bytes]) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(8)
        if not data:
            data = bytearray(rng.randbytes(rng.randint(1, 64)))
            continue
        i = rng.randrange(len(data))
        if op == 0:
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[i] = rng.choice(INTERESTING)
        elif op == 2:
            del data[rng.randrange(len(data)):]
        elif op == 3:
            data += rng.randbytes(rng.randint(1, 32))
        elif op == 4 and len(data) >= i + 4:
            struct.pack_into(">i", data, i, rng.choice([-1, 0, 1, 0x7FFFFFFF, -0x80000000, rng.randint(-5, 5000)]))
        elif op == 5 and len(data) >= i + 2:
            struct.pack_into(">h", data, i, rng.choice([-1, 0, 0x7FFF, -0x8000, rng.randint(-5, 300)]))
        elif op == 6:
            other = rng.choice(corpus)
            j = rng.randrange(len(other))
            data = data[:i] + bytearray(other[j:])
        else:
            j = rng.randrange(i, len(data))
            data[j:j] = data[i:j]
    return bytes(data)


@dataclass
class FuzzReport:
    frames: int = 0
    decoded: int = 0
    rejected: int = 0
    findings: list[tuple[bytes, str]] = field(default_factory=list)
    seconds: float = 0.0


def fuzz_decoder(frames: int, seed: int = 1) -> FuzzReport:
    """Mutated frames straight into the decoder: each must decode or raise FrameError."""
    from freshet.broker.server import _api_table

    table = _api_table()
    corpus = seed_corpus(table)
    rng = random.Random(seed)
    report = FuzzReport()
    start = time.perf_counter()
    for _ in range(frames):
        frame = mutate(rng, rng.choice(corpus), corpus)
        report.frames += 1
        try:
            header = read_request_header(frame)
            entry = table.get(header.api_key)
            if entry is None or not entry[0] <= header.api_version <= entry[1]:
                report.rejected += 1
                continue
            protocol.decode_request(frame, header)
            report.decoded += 1
        except FrameError:
            report.rejected += 1
        except Exception as exc:  # a finding: the decoder must not fail any other way
            report.findings.append((frame, repr(exc)))
    report.seconds = time.perf_counter() - start
    return report


def fuzz_records(batches: int, seed: int = 1) -> FuzzReport:
    """Mutated records sections in batches whose length and CRC-32C are made to hold again, straight into the
    produce path's walk over the records (scan_records, on every produced batch) and the records' decoder: each
    batch must pass or raise a FormatError (CORRUPT_MESSAGE / INVALID_RECORD to the client), nothing else."""
    seeds = [batch for batch, _code in record_level_batches(1_700_000_000_000).values()]
    seeds.append(encode_batch([(None, b"v" * 40, 1, (("a", None), ("b", b"x"))), (b"k" * 20, None, 2)]))
    # mostly values: most mutations land inside them and the batch still holds together (the walk checks the rest)
    seeds.append(encode_batch([(b"k" * 30, b"v" * 600, 1, (("h", b"x" * 200),)), (b"k", b"w" * 300, 2)]))
    corpus = [s[HEADER_SIZE:] for s in seeds]
    rng = random.Random(seed)
    report = FuzzReport()
    start = time.perf_counter()
    for _ in range(batches):
        base = rng.choice(seeds)
        records = mutate(rng, base[HEADER_SIZE:], corpus)
        batch = bytearray(base[:HEADER_SIZE] + records)
        struct.pack_into(">i", batch, 8, len(batch) - 12)
        batch = resealed(batch)
        report.frames += 1
        try:
            validate_batches(batch)
            scan_records(batch, timestamps=True)
            list(decode_records(batch))
            report.decoded += 1
        except FormatError:
            report.rejected += 1
        except Exception as exc:  # a finding: a client's records must not fail any other way
            report.findings.append((batch, repr(exc)))
    report.seconds = time.perf_counter() - start
    return report


def fuzz_live(host: str, port: int, frames: int, seed: int = 1, burst: int = 50,
              skip_apis: set[int] = DESTRUCTIVE_APIS, seeds: list[bytes] | None = None,
              connect: Callable[[], socket.socket] | None = None) -> FuzzReport:
    """Mutated frames over TCP, in bursts; reconnect whenever the broker closes on us. ``seeds``: the frames to
    mutate (default: one request per supported API and version, see ``seed_corpus``); ``connect``: how to open
    a connection (e.g. one that has authenticated first)."""
    from freshet.broker.server import _api_table

    corpus = [f for f in (seeds or seed_corpus(_api_table())) if struct.unpack_from(">h", f)[0] not in skip_apis]
    rng = random.Random(seed)
    report = FuzzReport()
    start = time.perf_counter()
    sock = None
    while report.frames < frames:
        if sock is None:
            sock = connect() if connect else socket.create_connection((host, port), timeout=5)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        payload = bytearray()
        for _ in range(min(burst, frames - report.frames)):
            frame = mutate(rng, rng.choice(corpus), corpus)
            if struct.unpack_from(">h", frame)[0] in skip_apis if len(frame) >= 2 else False:
                frame = frame[:1]
            payload += size_prefixed(frame)
            report.frames += 1
        try:
            sock.sendall(payload)
            sock.settimeout(0.05)
            while True:  # drain whatever answers came back
                chunk = sock.recv(1 << 16)
                if not chunk:
                    raise ConnectionError
                report.decoded += 1
        except (socket.timeout, BlockingIOError):
            pass
        except OSError:
            report.rejected += 1
            sock.close()
            sock = None
    if sock is not None:
        sock.close()
    report.seconds = time.perf_counter() - start
    return report
