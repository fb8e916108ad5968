"""``freshet produce`` and ``freshet consume``: records from stdin, records to stdout."""

from __future__ import annotations

import sys
from datetime import datetime, timezone

import click
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from freshet.client import ClientError, TopicAdmin, consumer_config, producer_config
from freshet.client.offsets import watermark_offsets
from freshet.client.produce import flush_delivered, produce_waiting

from .common import bootstrap_option, one_line_errors


@click.command()
@click.argument("topic")
@click.option("--key-separator", "-K", default=None, help="Split each line into key and value at this string.")
@click.option("--partition", "-p", default=None, type=int, help="Write every record to this partition.")
@bootstrap_option
@one_line_errors
def produce(topic: str, key_separator: str | None, partition: int | None, bootstrap: str) -> None:
    """Produce one record per line of standard input to TOPIC (idempotent, acks=all)."""
    count = TopicAdmin(bootstrap).partition_count(topic)
    if partition is not None and not 0 <= partition < count:
        raise ClientError(f"topic {topic!r} has partitions 0..{count - 1}, not {partition}")
    producer = Producer(producer_config(bootstrap, {"log_level": 0}))
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(err.str())

    sent = 0
    extra = {} if partition is None else {"partition": partition}
    for raw in sys.stdin.buffer:
        line = raw.rstrip(b"\r\n")
        key = None
        if key_separator is not None:
            key, sep, value = line.partition(key_separator.encode())
            if not sep:
                key, value = None, line
        else:
            value = line
        produce_waiting(producer, topic, value, key, on_delivery=on_delivery, **extra)
        sent += 1
        producer.poll(0)
    left = flush_delivered(producer, topic, 60)
    if failures or left:
        raise ClientError(f"{len(failures) + left} of {sent} records were not delivered"
                          + (f": {failures[0]}" if failures else ""))
    click.echo(f"produced {sent} records to {topic}", err=True)


def _parse_time(text: str) -> int:
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise ClientError(f"--from-time takes an ISO 8601 time such as 2026-11-22T10:00:00Z, got {text!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


@click.command()
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at each partition's log start offset.")
@click.option("--offset", type=int, default=None, help="Start at this offset (in every chosen partition).")
@click.option("--from-time", default=None, help="Start at the first record at or after this ISO time.")
@click.option("--partition", "-p", type=int, default=None, help="Read only this partition.")
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new records, like tail -f.")
@click.option("--max", "max_records", type=int, default=None, help="Stop after this many records.")
@click.option("--print-key", is_flag=True, help="Print key<separator>value.")
@click.option("--print-offset", is_flag=True, help="Print partition:offset before each record.")
@click.option("--separator", default="\t", show_default=True)
@bootstrap_option
@one_line_errors
def consume(topic: str, from_beginning: bool, offset: int | None, from_time: str | None, partition: int | None,
            follow: bool, max_records: int | None, print_key: bool, print_offset: bool, separator: str,
            bootstrap: str) -> None:
    """Print records of TOPIC, one per line.

    Without --follow it stops at the high watermark each partition had when it started.
    With no start option it starts at the end and follows, like kafka-console-consumer.
    """
    if sum(x is not None and x is not False for x in (from_beginning or None, offset, from_time)) > 1:
        raise ClientError("give at most one of --from-beginning, --offset, --from-time")
    if not (from_beginning or offset is not None or from_time):
        follow = True
    if offset is not None and offset < 0:
        raise ClientError("--offset must be 0 or more")
    if max_records is not None and max_records < 0:  # it printed nothing and exited 0
        raise ClientError(f"--max must be 0 or more (leave it out for no limit), got {max_records}")
    admin = TopicAdmin(bootstrap)
    count = admin.partition_count(topic)
    if partition is not None and not 0 <= partition < count:
        raise ClientError(f"topic {topic!r} has partitions 0..{count - 1}, not {partition}")
    chosen = [partition] if partition is not None else list(range(count))
    consumer = Consumer(consumer_config(bootstrap, {"log_level": 0}))
    try:
        marks = {p: watermark_offsets(consumer, TopicPartition(topic, p), 10) for p in chosen}
        ends = {p: high for p, (_low, high) in marks.items()}
        if from_time:
            ts = _parse_time(from_time)
            found = consumer.offsets_for_times([TopicPartition(topic, p, ts) for p in chosen], timeout=10)
            starts = {tp.partition: tp.offset if tp.offset >= 0 else ends[tp.partition] for tp in found}
        elif offset is not None:
            for p, (low, high) in marks.items():
                if not low <= offset <= high:
                    raise ClientError(f"offset {offset} is outside partition {p}'s range {low}..{high}")
            starts = {p: offset for p in chosen}
        elif from_beginning:
            starts = {p: low for p, (low, _high) in marks.items()}
        else:
            starts = dict(ends)
        consumer.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
        done: set[int] = set() if follow else {p for p in chosen if starts[p] >= ends[p]}
        printed = 0
        out = sys.stdout.buffer
        sep = separator.encode()
        while follow or len(done) < len(chosen):
            if max_records is not None and printed >= max_records:
                break
            messages = consumer.consume(1000, 0.5)
            if not messages and not follow:
                # offsets can have gaps (compaction, transaction markers): ask where we are
                for tp in consumer.position([TopicPartition(topic, p) for p in chosen if p not in done]):
                    if tp.offset >= ends[tp.partition]:
                        done.add(tp.partition)
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.code() == -191:  # _PARTITION_EOF
                        continue
                    raise ClientError(f"consume failed: {err.str()}")
                p, o = msg.partition(), msg.offset()
                if not follow and (p in done or o >= ends[p]):
                    done.add(p)
                    continue
                parts = []
                if print_offset:
                    parts.append(f"{p}:{o}".encode())
                if print_key:
                    parts.append(msg.key() or b"")
                parts.append(msg.value() or b"")
                out.write(sep.join(parts) + b"\n")
                printed += 1
                if not follow and o + 1 >= ends[p]:
                    done.add(p)
                if max_records is not None and printed >= max_records:
                    break
            out.flush()
    except KafkaException as exc:
        raise ClientError(f"consume failed: {exc}") from None
    finally:
        consumer.close()
