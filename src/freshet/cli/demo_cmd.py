"""``freshet demo access-logs``: the whole path on one machine, watched live."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import click
from confluent_kafka import Consumer, TopicPartition
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from freshet.client import TopicAdmin, consumer_config
from freshet.testing import BrokerProcess

from .gen_cmd import produce_access_logs


@click.group()
def demo() -> None:
    """Runnable demonstrations."""


@demo.command("access-logs")
@click.option("--seconds", default=20.0, show_default=True, help="How long the generator runs.")
@click.option("--rate", default=2000.0, show_default=True, help="Events per second.")
@click.option("--data-dir", default="./demo-data", show_default=True)
def access_logs(seconds: float, rate: float, data_dir: str) -> None:
    """Start a broker, generate web access logs into a 6-partition topic, and consume them live."""
    console = Console()
    os.makedirs(data_dir, exist_ok=True)
    broker = BrokerProcess(data_dir=data_dir, log_path=os.path.join(data_dir, "broker.log"))
    broker.start()
    console.print(f"[bold]broker[/] listening on {broker.bootstrap} (data in {data_dir}, log in {broker.log_path})")
    try:
        admin = TopicAdmin(broker.bootstrap)
        topic = "access-logs"
        if topic not in admin.list_topics():
            admin.create_topic(topic, 6)
        console.print(f"[bold]topic[/] {topic}: 6 partitions")
        produced = [0]
        errors: list[str] = []

        def run_generator() -> None:
            try:
                produced[0] = produce_access_logs(broker.bootstrap, topic, rate, None, seconds, 0.05, 0.01, 1,
                                                  on_progress=lambda n: produced.__setitem__(0, n))
            except Exception as exc:  # shown to the user below
                errors.append(str(exc))

        consumer = Consumer(consumer_config(broker.bootstrap, overrides={"log_level": 0}))
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(6)]
        consumer.assign([TopicPartition(topic, p, ends[p]) for p in range(6)])
        generator = threading.Thread(target=run_generator, daemon=True)
        generator.start()
        consumed = 0
        per_partition: Counter = Counter()
        statuses: Counter = Counter()
        recent: list[str] = []
        start = time.monotonic()
        with Live(console=console, refresh_per_second=4) as live:
            while generator.is_alive() or consumed < produced[0]:
                for msg in consumer.consume(2000, 0.25):
                    if msg.error():
                        continue
                    consumed += 1
                    per_partition[msg.partition()] += 1
                    line = msg.value().decode()
                    statuses[line.split('" ', 1)[1].split()[0] if '" ' in line else "?"] += 1
                    recent = (recent + [line])[-8:]
                if time.monotonic() - start > seconds + 30:
                    break
                elapsed = max(time.monotonic() - start, 1e-6)
                table = Table(title="consumed per partition")
                for p in range(6):
                    table.add_column(f"p{p}", justify="right")
                table.add_row(*(str(per_partition[p]) for p in range(6)))
                live.update(Group(
                    Panel("\n".join(r[:150] for r in recent) or "waiting for records...", title="latest records"),
                    table,
                    f"produced {produced[0]}  consumed {consumed}  ({consumed / elapsed:,.0f} records/s)  "
                    f"status codes {dict(statuses.most_common(4))}",
                ))
        consumer.close()
        if errors:
            console.print(f"[red]generator failed:[/] {errors[0]}")
            raise SystemExit(1)
        console.print()
        console.print(f"[green]done:[/] produced {produced[0]}, consumed {consumed} through the broker")
    finally:
        broker.stop()
