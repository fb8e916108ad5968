"""``freshet demo redelivery``: two kinds of broker on one log.

A queue (AMQP/JMS style) hands each message to one of many competing consumers and redelivers it when a
consumer dies before acknowledging; a log-based broker gives each partition to one consumer of a group, in
order. Freshet's share groups are the first kind, its consumer groups the second, on the same topic:

1. jobs go into a topic with 2 partitions;
2. three workers in one share group (more consumers than partitions) take them, each record acknowledged
   after its (simulated) work;
3. one worker is killed -9 mid-stream: what it held comes back and the others do it (delivery count 2);
4. so nothing is lost, but the jobs the dead worker held are done late: out of their partition's order;
5. a consumer group reading the same topic meanwhile sees every partition in strict offset order.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import click
from confluent_kafka import Consumer, Producer
from rich.table import Table

from freshet.client.admin import TopicAdmin
from freshet.client.config import consumer_config, producer_config
from freshet.client.queue import set_group_configs
from freshet.client.share_groups import describe_share_group

from .preamble import Demo, data_dir_option

TOPIC = "jobs"
GROUP = "workers"


class Worker:
    """One ``freshet queue consume`` process; every line it prints is a record it took, stamped on arrival."""

    def __init__(self, name: str, bootstrap: str, work_ms: float, kill_after: int | None = None) -> None:
        self.name = name
        self.kill_after = kill_after  # killed -9 by the reader the moment it has printed this many records
        self.killed_at: float | None = None
        self.lines: list[tuple[float, int, int, int]] = []  # (time, partition, offset, delivery count)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "freshet.cli.main", "queue", "consume", TOPIC, "--group", GROUP,
             "--work-ms", str(work_ms), "--batch", "20", "--idle", "6", "--bootstrap", bootstrap],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            partition, offset, delivery, *_ = line.split("\t")
            self.lines.append((time.monotonic(), int(partition), int(offset), int(delivery)))
            if len(self.lines) == self.kill_after:
                # At once, from here: the record just printed is in its simulated work, so the worker holds
                # it (and the rest of its batch) unacknowledged. A kill from a polling loop could land in the
                # moment between a batch's commit and the next fetch, when a worker holds nothing.
                self.kill()


    def kill(self) -> None:
        if self.killed_at is None:
            self.killed_at = time.monotonic()
            os.kill(self.proc.pid, signal.SIGKILL)

    def wait(self, timeout: float) -> None:
        self.proc.wait(timeout)
        self._reader.join(5)


def span(low: float, high: float, spec: str = "") -> str:
    """``low-high``, or one figure when both read the same (not "180-180")."""
    low_text, high_text = format(low, spec), format(high, spec)
    return low_text if low_text == high_text else f"{low_text}-{high_text}"


def _inversions(events: list[tuple[float, int, int]]) -> dict[int, int]:
    """Per partition: records handled after a record with a higher offset of the same partition was."""
    out: dict[int, int] = {}
    highest: dict[int, int] = {}
    for _, partition, offset in sorted(events):
        if offset < highest.get(partition, -1):
            out[partition] = out.get(partition, 0) + 1
        highest[partition] = max(highest.get(partition, -1), offset)
    return out


@click.command("redelivery")
@click.option("--jobs", default=600, show_default=True, type=click.IntRange(min=100),
              help="How many jobs go into the queue (at least 100: a worker is killed a few jobs into its share).")
@click.option("--work-ms", default=8.0, show_default=True, type=click.FloatRange(min=0),
              help="How long each job takes a worker.")
@data_dir_option("redelivery")
def redelivery_demo(jobs: int, work_ms: float, data_dir: str) -> None:
    """Queues vs logs: competing consumers, one killed, its jobs redelivered out of order; a consumer group keeps order."""
    with Demo(data_dir) as demo:
        _redelivery(demo, jobs, work_ms)


def _redelivery(demo: Demo, jobs: int, work_ms: float) -> None:
    console, bootstrap = demo.console, demo.bootstrap
    workers: list[Worker] = []
    try:
        TopicAdmin(bootstrap).create_topic(TOPIC, 2)
        producer = Producer(producer_config(bootstrap, {"log_level": 0}))
        for i in range(jobs):
            producer.produce(TOPIC, f"job-{i}".encode(), f"customer-{i % 40}".encode(), partition=i % 2)
        demo.require(producer.flush(30) == 0, "every job acknowledged by the log")
        console.print(f"[bold]1. the log[/]: broker on {bootstrap}; {jobs} jobs in topic {TOPIC!r}, 2 partitions")

        set_group_configs(bootstrap, GROUP, {"share.auto.offset.reset": "earliest",
                                             "share.session.timeout.ms": "2000", "share.heartbeat.interval.ms": "500"})
        # The first worker dies mid-batch: a few records into its fourth batch of 20.
        workers = [Worker(f"worker-{i + 1}", bootstrap, work_ms, kill_after=jobs // 10 + 5 if i == 0 else None)
                   for i in range(3)]
        console.print(f"[bold]2. a queue[/]: share group {GROUP!r} with 3 workers for 2 partitions; each takes 20 "
                      f"jobs at a time, each job takes {work_ms:g} ms and is acknowledged when done")
        ordered: list[tuple[float, int, int]] = []
        classic = threading.Thread(target=_consumer_group_reads, args=(bootstrap, jobs, ordered), daemon=True)
        classic.start()

        victim = workers[0]
        try:
            victim.wait(60)
        except subprocess.TimeoutExpired:
            pass
        demo.require(victim.killed_at is not None, f"the first worker got {victim.kill_after} jobs")
        killed_at = victim.killed_at
        held = len(victim.lines)
        console.print(f"[bold]3. a crash[/]: {victim.name} killed -9 after taking {held} jobs; what it had not "
                      "acknowledged goes back to the group once its session times out (2 s)")
        for w in workers[1:]:
            w.wait(120)
        classic.join(60)

        done = [(t, p, o, d) for w in workers[1:] for (t, p, o, d) in w.lines]
        redelivered = sorted({(p, o) for t, p, o, d in done if d > 1})
        everything = {(p, o) for w in workers for (_, p, o, _) in w.lines}
        by_survivors = {(p, o) for _, p, o, _ in done}
        demo.require(len(everything) == jobs, f"every job was taken by a worker ({len(everything)} of {jobs})")
        demo.require(by_survivors | {(p, o) for _, p, o, _ in victim.lines} == everything, "no job lost")
        demo.require(bool(redelivered), "the killed worker's unacknowledged jobs were redelivered")
        late = [t - killed_at for t, p, o, d in done if d > 1]
        table = Table(title="who did what")
        for col in ("worker", "jobs taken", "of them redelivered (delivery 2)", "state"):
            table.add_column(col)
        for w in workers:
            table.add_row(w.name, str(len(w.lines)), str(sum(1 for *_, d in w.lines if d > 1)),
                          "killed -9" if w is victim else "finished")
        console.print(table)
        console.print(f"   {len(redelivered)} jobs the dead worker held were done by the others "
                      f"{span(min(late), max(late), '.1f')} s after the kill; none was lost. (A job it had finished "
                      "but not yet acknowledged is done twice: at-least-once.)")

        queue_order = _inversions([(t, p, o) for t, p, o, _ in done])
        log_order = _inversions(ordered)
        demo.require(sum(queue_order.values()) > 0, "redelivery broke the queue's order")
        demo.require(not log_order and len(ordered) >= jobs, "the consumer group saw every partition in order")
        overtaken = sorted(sum(1 for t2, p2, o2, _ in done if p2 == p and o2 > o and t2 < t)
                           for t, p, o, d in done if d > 1)
        console.print(f"[bold]4. order[/]: a queue keeps no order: competing workers finish side by side "
                      f"({sum(queue_order.values())} jobs were done after a later job of their partition), and each "
                      f"redelivered job came after {span(overtaken[0], overtaken[-1])} later jobs of its partition")
        console.print(f"[bold]5. the log[/]: a consumer group read the same {len(ordered)} records meanwhile, every "
                      "partition in strict offset order (0 out of order): one consumer per partition, no redelivery")
        info = describe_share_group(bootstrap, GROUP)
        demo.require(info.backlog == 0, "the queue is drained")
        console.print(f"   share group {GROUP!r} now: start offsets "
                      f"{', '.join(f'{p.topic}[{p.partition}]={p.start_offset}' for p in info.partitions)}, "
                      f"backlog {info.backlog}")
        console.print("[green]done[/]: see `freshet groups describe workers` for a queue's state")
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.kill()
                w.proc.wait()


def _consumer_group_reads(bootstrap: str, jobs: int, out: list[tuple[float, int, int]]) -> None:
    """A classic consumer group member reading the topic from the start, as a log-based broker delivers it."""
    consumer = Consumer(consumer_config(bootstrap, "log-readers", {"log_level": 0}))
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + 60
    try:
        while len(out) < jobs and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                if m.error() is None:
                    out.append((time.monotonic(), m.partition(), m.offset()))
    finally:
        consumer.close()
