"""Bad input gets the error a real Kafka broker returns, changes nothing, and harms no one else."""

import struct
import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from freshet.format.record_batch import encode_batch
from freshet.testing.raw_kafka import RawConnection, fetch, produce


@pytest.fixture
def topic(broker, topic_name):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, config={"max.message.bytes": "2000"})])[topic_name].result(10)
    with RawConnection(broker.bootstrap) as conn:
        assert produce(conn, topic_name, 0, encode_batch([(b"k", b"original", 1)])).error_code == 0
    return topic_name


def stored(broker, topic):
    with RawConnection(broker.bootstrap) as conn:
        part = fetch(conn, topic, 0, 0)
        return part.high_watermark, bytes(part.records or b"")


def still_serving(broker, topic):
    with RawConnection(broker.bootstrap) as conn:
        return conn.request(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0


def test_crc_mismatch_is_corrupt_message_and_nothing_stored(broker, topic):
    before = stored(broker, topic)
    batch = bytearray(encode_batch([(b"k", b"tampered", 1)]))
    batch[-1] ^= 0x01
    with RawConnection(broker.bootstrap) as conn:
        assert produce(conn, topic, 0, bytes(batch)).error_code == ErrorCode.corrupt_message
        # the same connection keeps working
        assert produce(conn, topic, 0, encode_batch([(b"k", b"next", 1)])).error_code == 0
    hw, data = stored(broker, topic)
    assert hw == before[0] + 1 and b"tampered" not in data


def test_truncated_batch_and_wrong_magic(broker, topic):
    before = stored(broker, topic)
    batch = encode_batch([(b"k", b"v", 1)])
    bad_magic = bytearray(batch)
    bad_magic[16] = 1
    with RawConnection(broker.bootstrap) as conn:
        assert produce(conn, topic, 0, batch[:-5]).error_code == ErrorCode.corrupt_message
        assert produce(conn, topic, 0, bytes(bad_magic)).error_code == ErrorCode.invalid_record
    assert stored(broker, topic) == before


def test_batch_over_max_message_bytes(broker, topic):
    before = stored(broker, topic)
    with RawConnection(broker.bootstrap) as conn:
        assert produce(conn, topic, 0, encode_batch([(b"k", b"x" * 5000, 1)])).error_code == ErrorCode.message_too_large
    assert stored(broker, topic) == before


def test_missing_topic_and_partition(broker, topic):
    with RawConnection(broker.bootstrap) as conn:
        batch = encode_batch([(b"k", b"v", 1)])
        assert produce(conn, "no-such-topic", 0, batch).error_code == ErrorCode.unknown_topic_or_partition
        assert produce(conn, topic, 7, batch).error_code == ErrorCode.unknown_topic_or_partition
        assert fetch(conn, "no-such-topic", 0, 0).error_code == ErrorCode.unknown_topic_or_partition
    assert still_serving(broker, topic)


def test_invalid_acks(broker, topic):
    before = stored(broker, topic)
    with RawConnection(broker.bootstrap) as conn:
        assert produce(conn, topic, 0, encode_batch([(b"k", b"v", 1)]), acks=2).error_code == ErrorCode.invalid_required_acks
    assert stored(broker, topic) == before


def test_out_of_range_fetch(broker, topic):
    with RawConnection(broker.bootstrap) as conn:
        assert fetch(conn, topic, 0, 999).error_code == ErrorCode.offset_out_of_range
        assert fetch(conn, topic, 0, -5).error_code == ErrorCode.offset_out_of_range
        assert fetch(conn, topic, 0, 0).error_code == 0


def test_invalid_topic_names_and_duplicates(broker, topic):
    with RawConnection(broker.bootstrap) as conn:
        response = conn.request(19, 7, {"topics": [
            {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
            for name in ("bad/name", "..", "x" * 250, "", topic)
        ], "timeout": 5000, "validate_only": False})
        codes = [t.error_code for t in response.topics]
        assert codes == [ErrorCode.invalid_topic_exception] * 4 + [ErrorCode.topic_already_exists]
        md = conn.request(3, 12, {"topics": [{"name": "bad/name", "topic_id": None}],
                                  "allow_auto_topic_creation": True, "include_topic_authorized_operations": False})
        assert md.topics[0].error_code == ErrorCode.invalid_topic_exception


def test_bad_configs_and_partition_counts_change_nothing(broker, topic_name):
    with RawConnection(broker.bootstrap) as conn:
        response = conn.request(19, 7, {"topics": [
            {"name": topic_name + "-a", "num_partitions": 0, "replication_factor": 1, "assignments": [], "configs": []},
            {"name": topic_name + "-b", "num_partitions": 1, "replication_factor": 3, "assignments": [], "configs": []},
            {"name": topic_name + "-c", "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": [{"name": "retention.ms", "value": "soon"}]},
            {"name": topic_name + "-d", "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": [{"name": "no.such.config", "value": "1"}]},
        ], "timeout": 5000, "validate_only": False})
        assert [t.error_code for t in response.topics] == [37, 38, 40, 40]
        names = {t.name for t in conn.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                      "include_topic_authorized_operations": False}).topics}
        assert not any(n.startswith(topic_name) for n in names)


def test_unsupported_api_versions_version_gets_v0_answer(broker):
    with RawConnection(broker.bootstrap) as conn:
        conn.send_frame(struct.pack(">hhih", 18, 99, 7, 1) + b"x")
        frame = conn.read_frame()
        correlation_id, error_code = struct.unpack_from(">ih", frame, 0)
        assert (correlation_id, error_code) == (7, ErrorCode.unsupported_version)


@pytest.mark.parametrize("frame", [
    b"\x00",  # too short for a header
    struct.pack(">hhih", 999, 0, 1, -1),  # unknown API key
    struct.pack(">hhih", 0, 99, 1, -1),  # unsupported Produce version
    struct.pack(">hhih", 3, 12, 1, -1) + b"\xff" * 20,  # body that does not decode
])
def test_unparseable_frames_close_the_connection_only(broker, topic, frame):
    before = stored(broker, topic)
    with RawConnection(broker.bootstrap) as bystander:
        with RawConnection(broker.bootstrap) as conn:
            conn.send_frame(frame)
            assert conn.is_closed_by_peer()
        assert bystander.request(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0
    assert stored(broker, topic) == before


def test_oversized_length_prefix_is_cut_off(broker, topic):
    with RawConnection(broker.bootstrap) as conn:
        conn.send_bytes(struct.pack(">i", 2**31 - 1))
        assert conn.is_closed_by_peer()
    with RawConnection(broker.bootstrap) as conn:
        conn.send_bytes(struct.pack(">i", -4))
        assert conn.is_closed_by_peer()
    assert still_serving(broker, topic)


def test_idempotent_replay_is_not_duplicated_and_gap_is_refused(broker, topic_name):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1)])[topic_name].result(10)
    with RawConnection(broker.bootstrap) as conn:
        init = conn.request(22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                    "producer_id": -1, "producer_epoch": -1})
        pid, epoch = init.producer_id, init.producer_epoch
        assert init.error_code == 0 and pid >= 0

        def batch(seq, n=2):
            return encode_batch([(b"k", b"s%d" % (seq + i), 1) for i in range(n)],
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq)

        first = produce(conn, topic_name, 0, batch(0))
        assert (first.error_code, first.base_offset) == (0, 0)
        retry = produce(conn, topic_name, 0, batch(0))  # the answer was lost; the client retries
        assert (retry.error_code, retry.base_offset) == (0, 0)
        assert produce(conn, topic_name, 0, batch(2)).base_offset == 2
        gap = produce(conn, topic_name, 0, batch(10))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        part = fetch(conn, topic_name, 0, 0)
        assert part.high_watermark == 4


@pytest.fixture
def compacted(broker, topic_name):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, config={"cleanup.policy": "compact"})])[topic_name].result(10)
    return topic_name


def _deliver(broker, topic, keys, **conf):
    """Produce one record per key (None: keyless) with confluent-kafka; each record's delivery error code."""
    codes = {}
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, **conf})
    producer.list_topics(topic, timeout=10)  # the partition known first: records do not wait for it one by one
    for i, key in enumerate(keys):
        producer.produce(topic, b"v%d" % i, key=key,
                         on_delivery=lambda err, msg, i=i: codes.__setitem__(i, err.code() if err else None))
        if conf.get("linger.ms") == 0:
            assert producer.flush(10) == 0  # one record per request, so one per batch
    assert producer.flush(30) == 0
    return [codes[i] for i in range(len(keys))]


def test_keyless_records_on_a_compacted_topic_fail_alone_with_kafkas_record_errors(broker, compacted):
    keys = [b"a", None, b"c", b"d", None, b"f"]
    # one batch: the keyless records fail as invalid, the others of the batch with them ("a different record")
    codes = _deliver(broker, compacted, keys, **{"linger.ms": 3000, "batch.num.messages": 100})
    assert codes == [KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD,
                     KafkaError._INVALID_DIFFERENT_RECORD, KafkaError._INVALID_DIFFERENT_RECORD,
                     KafkaError.INVALID_RECORD, KafkaError._INVALID_DIFFERENT_RECORD]
    assert stored(broker, compacted) == (0, b"")
    # one record per batch: only the keyless ones fail
    codes = _deliver(broker, compacted, keys, **{"linger.ms": 0})
    assert codes == [None, KafkaError.INVALID_RECORD, None, None, KafkaError.INVALID_RECORD, None]
    assert stored(broker, compacted)[0] == 4


def test_the_produce_response_names_each_keyless_record(broker, compacted):
    batch = encode_batch([(b"a", b"1", 1), (None, b"2", 1), (b"c", b"3", 1), (None, b"4", 1)])
    with RawConnection(broker.bootstrap) as conn:
        answer = produce(conn, compacted, 0, batch, version=9)
        assert answer.error_code == ErrorCode.invalid_record and answer.base_offset == -1
        assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [
            (i, "Compacted topic cannot accept message without key") for i in (1, 3)]
        assert answer.error_message == ("2 of the 4 records of a batch (index 1, 3) have no key: "
                                        "a compacted topic accepts only records with a key")
        older = produce(conn, compacted, 0, batch, version=7)  # before record_errors: the partition's error only
        assert older.error_code == ErrorCode.invalid_record
        tombstone = produce(conn, compacted, 0, encode_batch([(b"a", None, 1)]), version=9)
        assert tombstone.error_code == ErrorCode.none and tombstone.record_errors == ()
    assert stored(broker, compacted)[0] == 1


def test_a_record_too_far_from_the_clock_fails_alone_with_its_record_error(broker, topic_name):
    """message.timestamp.before.max.ms: as Kafka, INVALID_TIMESTAMP names the record at fault; the rest of its batch
    fails with it and nothing is written."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, config={"message.timestamp.before.max.ms": "60000"})])[
        topic_name].result(10)
    now = int(time.time() * 1000)
    codes = {}
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "linger.ms": 3000})
    producer.list_topics(topic_name, timeout=10)
    for i, timestamp in enumerate((now, now - 3600_000, now)):
        producer.produce(topic_name, b"v", key=b"k", timestamp=timestamp,
                         on_delivery=lambda err, msg, i=i: codes.__setitem__(i, err.code() if err else None))
    assert producer.flush(30) == 0
    # (librdkafka 2.16.0 was seen to fail the rest of the batch with the partition's INVALID_TIMESTAMP too, where
    # for INVALID_RECORD it reports "a different record": either is the client's reading of the same answer)
    assert codes[1] == KafkaError.INVALID_TIMESTAMP
    assert {codes[0], codes[2]} <= {KafkaError.INVALID_TIMESTAMP, KafkaError._INVALID_DIFFERENT_RECORD}
    with RawConnection(broker.bootstrap) as conn:
        answer = produce(conn, topic_name, 0, encode_batch([(b"k", b"v", now), (b"k", b"v", now - 3600_000)]))
        assert answer.error_code == ErrorCode.invalid_timestamp
        assert [e.batch_index for e in answer.record_errors] == [1]
        assert "message.timestamp.before.max.ms=60000" in answer.record_errors[0].batch_index_error_message
        assert answer.error_message.startswith("1 of the 2 records of a batch (index 1) have a timestamp too far")
    assert stored(broker, topic_name) == (0, b"")


@pytest.fixture
def record_checking_topics(broker, topic_name):
    """Every topic's produce path walks every record: a compacted one (keys), one with a timestamp bound, a plain one."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {f"{topic_name}-compact": {"cleanup.policy": "compact"},
               f"{topic_name}-bounded": {"message.timestamp.before.max.ms": "3600000"},
               f"{topic_name}-plain": {}}
    for name, config in configs.items():
        admin.create_topics([NewTopic(name, 1, config=config)])[name].result(10)
    return list(configs)


def _log_end(broker) -> int:
    with open(broker.log_path) as log:
        return log.seek(0, 2)


def _log_after(broker, start: int) -> str:
    with open(broker.log_path) as log:
        log.seek(start)
        return log.read()


def test_records_that_do_not_hold_together_are_invalid_record_and_nothing_is_stored(broker, record_checking_topics):
    """A batch whose CRC-32C holds but whose records do not hold together (a header key of negative size, a value or
    a header count past the record, offset deltas out of sequence, a records_count that disagrees with the records):
    INVALID_RECORD, as Kafka's record iterator; nothing stored; the connection keeps working."""
    from freshet.testing.fuzz import record_level_batches

    batches = record_level_batches(int(time.time() * 1000))
    log_start = _log_end(broker)
    with RawConnection(broker.bootstrap) as conn:
        for topic in record_checking_topics:
            for name, (batch, code) in batches.items():
                if code == 0:
                    continue
                answer = produce(conn, topic, 0, batch)
                assert (name, answer.error_code) == (name, ErrorCode.invalid_record) == (name, code)
                if name == "offset delta out of sequence":  # Produce v8+: the record at fault
                    assert [e.batch_index for e in answer.record_errors] == [1]
            assert fetch(conn, topic, 0, 0).high_watermark == 0
            assert produce(conn, topic, 0, encode_batch([(b"k", b"fine", int(time.time() * 1000))])).error_code == 0
    assert still_serving(broker, record_checking_topics[0])
    assert "Traceback" not in _log_after(broker, log_start)


def test_a_header_key_that_is_not_utf8_is_stored_as_sent_as_kafka_does(broker, record_checking_topics):
    """Kafka decodes a header key with Java's UTF-8 decoder, which replaces what is not UTF-8: the record is
    accepted. So here, on the topics that decode records too (a UnicodeDecodeError escaped there before), and a
    fetch returns the key's bytes as they were sent."""
    now = int(time.time() * 1000)
    batch = encode_batch([(b"k", b"v", now, (("\udcff\udcfekey", b"hv"),))])
    assert b"\xff\xfekey" in batch
    log_start = _log_end(broker)
    with RawConnection(broker.bootstrap) as conn:
        for topic in record_checking_topics:
            assert produce(conn, topic, 0, batch).error_code == ErrorCode.none
            part = fetch(conn, topic, 0, 0)
            assert part.high_watermark == 1 and b"\xff\xfekey" in bytes(part.records)
    assert still_serving(broker, record_checking_topics[0])
    assert "Traceback" not in _log_after(broker, log_start)  # (before: "handler for API key 0 failed", closed)
