"""``freshet transactions list | describe``."""

from __future__ import annotations

import datetime

import click

from freshet.client.transactions import STATES, describe_transaction, list_transactions

from .common import bootstrap_option, one_line_errors


@click.group()
def transactions() -> None:
    """Kafka transactions: which are open, and what they hold back."""


@transactions.command("list")
@click.option("--state", type=click.Choice(STATES), default=None, help="Only transactions in this state.")
@bootstrap_option
@one_line_errors
def list_(state: str | None, bootstrap: str) -> None:
    """Every transactional id: producer id and state."""
    for t in list_transactions(bootstrap, state):
        click.echo(f"{t.transactional_id}\t{t.producer_id}\t{t.state}")


@transactions.command("describe")
@click.argument("transactional_id")
@bootstrap_option
@one_line_errors
def describe(transactional_id: str, bootstrap: str) -> None:
    """State, producer, and per partition the last stable offset's lag behind the high watermark."""
    t = describe_transaction(transactional_id, bootstrap)
    started = "-" if t.start_time_ms < 0 else datetime.datetime.fromtimestamp(
        t.start_time_ms / 1000, datetime.timezone.utc).isoformat(timespec="seconds")
    click.echo(f"{t.transactional_id}: {t.state}, producer {t.producer_id} epoch {t.producer_epoch}, "
               f"timeout {t.timeout_ms} ms, started {started}")
    if t.partitions:
        click.echo("topic	partition	last stable offset	high watermark	held back")
        for (topic, partition), (lso, hw) in sorted(t.partitions.items()):
            click.echo(f"{topic}	{partition}	{lso}	{hw}	{hw - lso}")
