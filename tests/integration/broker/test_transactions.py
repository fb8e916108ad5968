"""Kafka transactions through confluent-kafka's transactional API, against a real broker process."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from freshet.format.record_batch import encode_batch
from freshet.testing.cli import freshet
from freshet.testing.polling import wait_for
from freshet.testing.raw_kafka import RawConnection, fetch, produce
from freshet.testing.topics import create_topic, read_to_end

HERE = os.path.dirname(__file__)


def transactional(bootstrap: str, transactional_id: str, **extra) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **extra})
    producer.init_transactions(30)
    return producer


def read(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value a consumer of ``isolation`` reads from the start of ``topic`` up to the end it sees."""
    return [value for _, value in read_to_end(bootstrap, topic, partitions, isolation)]


def ends(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    """(end offset under read_committed = the last stable offset, high watermark)."""
    with RawConnection(bootstrap) as conn:
        body = {"replica_id": -1, "isolation_level": 1, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]}
        lso = conn.request(2, 5, body).topics[0].partitions[0].offset
        return lso, fetch(conn, topic, partition, 0).high_watermark


def test_committed_records_are_read_and_aborted_ones_are_not(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    producer = transactional(broker.bootstrap, f"tx-{topic_name}")
    for label, count, commit in (("c", 10, True), ("a", 5, False), ("d", 3, True)):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic_name, b"%s%d" % (label.encode(), i), partition=i % 2)
        producer.flush(10)  # on the broker before the abort: read_uncommitted sees them, read_committed not
        producer.commit_transaction(10) if commit else producer.abort_transaction(10)
    committed = sorted(read(broker.bootstrap, topic_name, 2, "read_committed"))
    assert committed == sorted([b"c%d" % i for i in range(10)] + [b"d%d" % i for i in range(3)])
    assert len(read(broker.bootstrap, topic_name, 2, "read_uncommitted")) == 18
    for p in range(2):
        lso, hw = ends(broker.bootstrap, topic_name, p)
        assert lso == hw  # nothing left open


def test_an_open_transaction_holds_back_read_committed_readers(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic_name, b"before", partition=0)
    plain.flush(10)
    producer = transactional(broker.bootstrap, f"tx-{topic_name}")
    producer.begin_transaction()
    producer.produce(topic_name, b"inside", partition=0)
    producer.flush(10)
    plain.produce(topic_name, b"after", partition=0)  # behind the open transaction
    plain.flush(10)
    lso, hw = ends(broker.bootstrap, topic_name, 0)
    assert (lso, hw) == (1, 3)
    assert read(broker.bootstrap, topic_name, 1, "read_committed") == [b"before"]
    assert read(broker.bootstrap, topic_name, 1, "read_uncommitted") == [b"before", b"inside", b"after"]
    producer.commit_transaction(10)
    assert read(broker.bootstrap, topic_name, 1, "read_committed") == [b"before", b"inside", b"after"]
    assert ends(broker.bootstrap, topic_name, 0)[0] == 4  # past the marker


def test_consume_transform_produce_commits_output_and_offsets_together(broker, topic_name):
    source, sink, group = topic_name, f"{topic_name}-out", f"g-{topic_name}"
    create_topic(broker.bootstrap, source, 2)
    create_topic(broker.bootstrap, sink, 2)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(100):
        plain.produce(source, b"%d" % i, partition=i % 2)
    plain.flush(10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.subscribe([source])
    producer = transactional(broker.bootstrap, f"tx-{topic_name}")
    done = transactions = 0
    deadline = time.monotonic() + 60
    while done < 100 and time.monotonic() < deadline:
        batch = [m for m in consumer.consume(10, 1.0) if m.error() is None]
        if not batch:
            continue
        producer.begin_transaction()
        for m in batch:
            producer.produce(sink, b"x" + m.value(), partition=m.partition())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 10)
        transactions += 1
        if transactions == 3:  # one transaction aborted on the way: its input is read again
            producer.abort_transaction(10)
            for tp in consumer.committed(consumer.assignment(), 10):
                consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
            continue
        producer.commit_transaction(10)
        done += len(batch)
    consumer.close()
    out = read(broker.bootstrap, sink, 2, "read_committed")
    assert sorted(out) == sorted(b"x%d" % i for i in range(100))  # each input exactly once
    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    committed = check.committed([TopicPartition(source, 0), TopicPartition(source, 1)], 10)
    check.close()
    assert [tp.offset for tp in committed] == [50, 50]


def test_a_new_producer_with_the_same_id_fences_the_old_one(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    zombie = transactional(broker.bootstrap, f"tx-{topic_name}")
    zombie.begin_transaction()
    zombie.produce(topic_name, b"zombie", partition=0)
    zombie.flush(10)
    successor = transactional(broker.bootstrap, f"tx-{topic_name}")  # aborts the zombie's transaction
    successor.begin_transaction()
    successor.produce(topic_name, b"successor", partition=0)
    successor.commit_transaction(10)
    with pytest.raises(KafkaException) as fenced:
        zombie.produce(topic_name, b"late", partition=0)
        zombie.commit_transaction(10)
    assert fenced.value.args[0].fatal() or "fenced" in str(fenced.value).lower()
    assert read(broker.bootstrap, topic_name, 1, "read_committed") == [b"successor"]


def test_a_transaction_past_its_timeout_is_aborted_by_the_coordinator(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    producer = transactional(broker.bootstrap, f"tx-{topic_name}", **{"transaction.timeout.ms": 1500})
    producer.begin_transaction()
    producer.produce(topic_name, b"abandoned", partition=0)
    producer.flush(10)
    wait_for(lambda: ends(broker.bootstrap, topic_name, 0)[0] == ends(broker.bootstrap, topic_name, 0)[1],
             30, "the coordinator to abort the abandoned transaction")
    assert read(broker.bootstrap, topic_name, 1, "read_committed") == []
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)


def test_after_kill_9_an_open_transaction_is_aborted_and_a_committed_one_kept(own_broker, topic_name):
    create_topic(own_broker.bootstrap, topic_name, 1)
    done = transactional(own_broker.bootstrap, f"tx-done-{topic_name}")
    done.begin_transaction()
    done.produce(topic_name, b"committed", partition=0)
    done.commit_transaction(10)
    open_ = transactional(own_broker.bootstrap, f"tx-open-{topic_name}")
    open_.begin_transaction()
    open_.produce(topic_name, b"open", partition=0)
    open_.flush(10)
    own_broker.kill()
    own_broker.start()
    wait_for(lambda: ends(own_broker.bootstrap, topic_name, 0)[0] == ends(own_broker.bootstrap, topic_name, 0)[1],
             30, "the restarted coordinator to abort the open transaction")
    assert read(own_broker.bootstrap, topic_name, 1, "read_committed") == [b"committed"]
    again = transactional(own_broker.bootstrap, f"tx-open-{topic_name}")  # the id is usable again
    again.begin_transaction()
    again.produce(topic_name, b"again", partition=0)
    again.commit_transaction(10)
    assert read(own_broker.bootstrap, topic_name, 1, "read_committed") == [b"committed", b"again"]


def test_bad_transactional_requests_get_kafkas_errors_and_change_nothing(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    tid = f"tx-{topic_name}"
    with RawConnection(broker.bootstrap) as conn:
        init = conn.request(22, 4, {"transactional_id": tid, "transaction_timeout": 0, "producer_id": -1,
                                    "producer_epoch": -1})
        assert init.error_code == ErrorCode.invalid_transaction_timeout
        init = conn.request(22, 4, {"transactional_id": tid, "transaction_timeout": 60000, "producer_id": -1,
                                    "producer_epoch": -1})
        assert init.error_code == ErrorCode.none
        again = conn.request(22, 4, {"transactional_id": tid, "transaction_timeout": 60000, "producer_id": -1,
                                     "producer_epoch": -1})
        assert (again.producer_id, again.producer_epoch) == (init.producer_id, init.producer_epoch + 1)
        pid, epoch = again.producer_id, again.producer_epoch
        end = conn.request(26, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                   "committed": True})
        assert end.error_code == ErrorCode.invalid_txn_state  # nothing to commit
        end = conn.request(26, 3, {"transactional_id": "never-seen", "producer_id": pid, "producer_epoch": epoch,
                                   "committed": True})
        assert end.error_code == ErrorCode.invalid_producer_id_mapping
        add = conn.request(24, 3, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                   "v3_and_below_producer_epoch": epoch - 1, "v3_and_below_topics": [
                                       {"name": topic_name, "partitions": [0]}]})
        assert add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == \
            ErrorCode.producer_fenced
        add = conn.request(24, 3, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                   "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [
                                       {"name": topic_name, "partitions": [0]}, {"name": "no-such-topic",
                                                                                 "partitions": [0]}]})
        codes = {t.name: t.results_by_partition[0].partition_error_code for t in add.results_by_topic_v3_and_below}
        assert codes == {topic_name: ErrorCode.operation_not_attempted,
                         "no-such-topic": ErrorCode.unknown_topic_or_partition}
        commit = conn.request(28, 3, {"transactional_id": tid, "group_id": "g", "producer_id": pid,
                                      "producer_epoch": epoch, "generation_id": -1, "member_id": "",
                                      "group_instance_id": None, "topics": [
                                          {"name": topic_name, "partitions": [
                                              {"partition_index": 0, "committed_offset": 1,
                                               "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        assert commit.topics[0].partitions[0].error_code == ErrorCode.invalid_txn_state  # no AddOffsetsToTxn
        # a transactional batch to a partition the transaction never added
        batch = encode_batch([(b"k", b"sneaked", 1)], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                             attributes=0x10)
        assert produce(conn, topic_name, 0, batch).error_code == ErrorCode.invalid_txn_state
        add = conn.request(24, 3, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                   "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [
                                       {"name": topic_name, "partitions": [0]}]})
        assert add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ErrorCode.none
        assert produce(conn, topic_name, 1, batch).error_code == ErrorCode.invalid_txn_state  # 1 was not added
        stale = encode_batch([(b"k", b"stale", 1)], producer_id=pid, producer_epoch=epoch - 1, base_sequence=0,
                             attributes=0x10)
        assert produce(conn, topic_name, 0, stale).error_code == ErrorCode.invalid_producer_epoch  # a zombie
        # a producer may not write control batches
        marker = encode_batch([(b"\0\0\0\1", b"\0\0\0\0\0\0", 1)], producer_id=pid, producer_epoch=epoch,
                              attributes=0x30)
        assert produce(conn, topic_name, 0, marker).error_code == ErrorCode.invalid_record
        assert [fetch(conn, topic_name, p, 0).high_watermark for p in (0, 1)] == [0, 0]  # nothing was written
        described = conn.request(65, 0, {"transactional_ids": [tid]}).transaction_states
        assert [(s.transaction_state, s.error_code, s.producer_id) for s in described] == [
            ("Ongoing", ErrorCode.none, pid)]
        assert [(t.topic, list(t.partitions)) for t in described[0].topics] == [(topic_name, [0])]
        listed = conn.request(66, 1, {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [pid],
                                      "duration_filter": -1})
        assert [s.transactional_id for s in listed.transaction_states] == [tid]
        assert list(listed.unknown_state_filters) == ["Bogus"]
        producers = conn.request(61, 0, {"topics": [{"name": topic_name, "partition_indexes": [0, 9]}]})
        found, missing = producers.topics[0].partitions
        assert found.error_code == ErrorCode.none and missing.error_code == ErrorCode.unknown_topic_or_partition
        assert found.active_producers == ()  # every transactional write above was refused


def test_a_processor_killed_9_again_and_again_outputs_each_input_exactly_once(broker, topic_name):
    source, sink, group = topic_name, f"{topic_name}-out", f"g-{topic_name}"
    create_topic(broker.bootstrap, source, 3)
    create_topic(broker.bootstrap, sink, 3)
    total = 30_000
    feeder = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    cmd = [sys.executable, os.path.join(HERE, "txn_processor.py"), broker.bootstrap, source, sink, group,
           f"tx-{topic_name}"]
    rng = random.Random(7)
    written = 0
    for kill in range(5):
        for _ in range(total // 5):  # more input arrives while the processor is down
            feeder.produce(source, b"%d" % written, partition=written % 3)
            written += 1
        feeder.flush(30)
        processor = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        processed = 0
        wanted = rng.randint(1, 3000)  # once it has committed this many, kill it inside its next transaction
        while True:
            line = processor.stdout.readline().split()
            assert line, "the processor died on its own"
            if line[0] == "committed":
                processed += int(line[1])
            elif processed >= wanted:
                break
        processor.send_signal(signal.SIGKILL)
        processor.wait()
    processor = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: sum(ends(broker.bootstrap, sink, p)[0] for p in range(3)) >= total, 120,
                 "the last processor to catch up")
        check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        wait_for(lambda: sum(tp.offset for tp in check.committed(
            [TopicPartition(source, p) for p in range(3)], 10)) == total, 60, "the input offsets to be committed")
        check.close()
    finally:
        processor.kill()
        processor.wait()
    out = read(broker.bootstrap, sink, 3, "read_committed")
    assert len(out) == total and sorted(out) == sorted(b"out-%d" % i for i in range(total))  # no dup, no loss
    assert len(read(broker.bootstrap, sink, 3, "read_uncommitted")) > total  # the killed ones' aborted output
    for p in range(3):
        lso, hw = ends(broker.bootstrap, sink, p)
        assert lso == hw  # no transaction left hanging


def test_describe_producers_shows_where_an_open_transaction_holds_the_partition(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    producer = transactional(broker.bootstrap, f"tx-{topic_name}")
    producer.begin_transaction()
    producer.produce(topic_name, b"inside", partition=0)
    producer.flush(10)
    with RawConnection(broker.bootstrap) as conn:
        described = conn.request(61, 0, {"topics": [{"name": topic_name, "partition_indexes": [0]}]})
        (active,) = described.topics[0].partitions[0].active_producers
        assert (active.last_sequence, active.current_txn_start_offset) == (0, 0)
        producer.commit_transaction(10)
        described = conn.request(61, 0, {"topics": [{"name": topic_name, "partition_indexes": [0]}]})
        assert described.topics[0].partitions[0].active_producers[0].current_txn_start_offset == -1


def test_freshet_transactions_list_and_describe_show_what_an_open_transaction_holds_back(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    producer = transactional(broker.bootstrap, f"tx-{topic_name}")
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic_name, b"%d" % i, partition=1)
    producer.flush(10)

    listed = freshet(broker, "transactions", "list", "--state", "Ongoing")
    assert listed.returncode == 0 and f"tx-{topic_name}\t" in listed.stdout and "\tOngoing" in listed.stdout
    described = freshet(broker, "transactions", "describe", f"tx-{topic_name}")
    assert described.returncode == 0, described.stderr
    assert "Ongoing" in described.stdout
    assert f"{topic_name}\t1\t0\t3\t3" in described.stdout.splitlines()  # 3 records held back on partition 1
    producer.commit_transaction(10)
    bad = freshet(broker, "transactions", "describe", "no-such-transaction")
    assert bad.returncode == 1 and bad.stderr.startswith("error: ") and len(bad.stderr.strip().splitlines()) == 1
    bad = freshet(broker, "transactions", "list", "--state", "Sleeping")
    assert bad.returncode != 0 and "Sleeping" in bad.stderr
