"""What every demo shares: a console, a data directory with the demo's own broker in it, and checked steps.

    @click.command("name")
    @data_dir_option("name")
    def name_demo(data_dir: str) -> None:
        with Demo(data_dir) as demo:       # ./demo-data/name emptied, a broker started on it
            ...                            # demo.console, demo.bootstrap, demo.check(ok, "what held")
            demo.finish()                  # "every step held", or exit 1
"""

from __future__ import annotations

import json
import os
import shutil
import time

import click
from rich.console import Console

from freshet.client import TopicAdmin
from freshet.client.reading import read_to_end, reader
from freshet.local import BrokerProcess


def data_dir_option(name: str):
    """``--data-dir``, by default ./demo-data/NAME."""
    return click.option("--data-dir", default=f"./demo-data/{name}", show_default=True,
                        help="Emptied, then holds the demo's broker log and everything else it writes.")


class Demo:
    """One run of a demo. ``with Demo(data_dir) as demo`` empties ``data_dir`` (made absolute) and starts the
    demo's own broker on it (its log in ``data_dir/log``, its output in ``data_dir/broker.log``); the broker
    stops when the block ends, however it ends. ``fresh=False`` keeps what the directory holds;
    ``broker=False`` leaves starting the broker to :meth:`start_broker` (for one with options of its own)."""

    def __init__(self, data_dir: str, *, fresh: bool = True, broker: bool = True) -> None:
        self.console = Console()
        self.data_dir = os.path.abspath(data_dir)
        self.fresh = fresh
        self.start_broker_on_enter = broker
        self.broker: BrokerProcess | None = None
        self.failures: list[str] = []

    def __enter__(self) -> Demo:
        if self.fresh:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        os.makedirs(self.data_dir, exist_ok=True)
        if self.start_broker_on_enter:
            self.start_broker()
        return self

    def __exit__(self, *exc) -> None:
        if self.broker is not None:
            self.broker.stop()

    def start_broker(self, **options) -> BrokerProcess:
        """The demo's broker on ``data_dir``; ``options`` as :class:`BrokerProcess` takes them."""
        self.broker = BrokerProcess(data_dir=os.path.join(self.data_dir, "log"),
                                    log_path=os.path.join(self.data_dir, "broker.log"), **options)
        self.broker.start()
        return self.broker

    @property
    def bootstrap(self) -> str:
        assert self.broker is not None, "the demo's broker is not started"
        return self.broker.bootstrap

    def check(self, ok: bool, what: str) -> bool:
        """Show a step's claim with ✓ or ✗; a ✗ makes :meth:`finish` exit 1."""
        self.console.print(("  [green]✓[/] " if ok else "  [red]✗[/] ") + what)
        if not ok:
            self.failures.append(what)
        return ok

    def require(self, ok: bool, what: str) -> None:
        """A claim the rest of the demo builds on: silent when it holds; otherwise shown, and the demo ends
        (exit 1)."""
        if not ok:
            self.check(False, what)
            self.finish()

    def finish(self) -> None:
        """'every step held', or how many did not and exit 1."""
        if self.failures:
            self.console.print(f"[red]{len(self.failures)} step(s) did not hold[/]")
            raise SystemExit(1)
        self.console.print("[green]every step held[/]")


def read_records(bootstrap: str, topic: str) -> list:
    """Every record of ``topic`` now, all partitions (confluent-kafka messages)."""
    consumer = reader(bootstrap)
    out: list = []
    try:
        partitions = TopicAdmin(bootstrap).partition_count(topic)
        read_to_end(consumer, [(topic, p, -2) for p in range(partitions)], out.append, 30)
    finally:
        consumer.close()
    return out


def json_values(bootstrap: str, topic: str, at_least: int = 0, timeout_s: float = 30.0) -> list:
    """The topic's values as JSON, once there are ``at_least`` (or what there is after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        values = [json.loads(m.value()) for m in read_records(bootstrap, topic)]
        if len(values) >= at_least or time.monotonic() > deadline:
            return values
        time.sleep(0.2)
