"""``freshet broker start``."""

from __future__ import annotations

import asyncio
import logging
import sys

import click


@click.group()
def broker() -> None:
    """Run the Freshet broker."""


@broker.command("start")
@click.option("--data-dir", default="./data", show_default=True, help="Where the log lives.")
@click.option("--port", default=9092, show_default=True, type=int, help="0 picks a free port.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--advertised-host", default=None, help="Host clients are told to connect to.")
@click.option("--auto-create-topics/--no-auto-create-topics", default=False, show_default=True)
@click.option("--default-partitions", default=1, show_default=True, type=int)
@click.option("--cleaner-interval-ms", default=30_000, show_default=True, type=int,
              help="How often retention and compaction run.")
@click.option("--initial-rebalance-delay-ms", default=100, show_default=True, type=int,
              help="How long a new consumer group waits for more members before its first assignment.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def start(data_dir: str, port: int, host: str, advertised_host: str | None, auto_create_topics: bool,
          default_partitions: int, cleaner_interval_ms: int, initial_rebalance_delay_ms: int, log_level: str) -> None:
    """Start a broker in the foreground (Ctrl-C stops it cleanly)."""
    from freshet.broker import BrokerConfig, run_broker

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = BrokerConfig(
        data_dir=data_dir, host=host, port=port, advertised_host=advertised_host,
        auto_create_topics=auto_create_topics, default_partitions=default_partitions,
        cleaner_interval_ms=cleaner_interval_ms, initial_rebalance_delay_ms=initial_rebalance_delay_ms,
    )

    def ready(b) -> None:
        # one line on stdout that scripts and tests wait for
        print(f"freshet broker listening on {b.advertised_host}:{b.port}", flush=True)

    try:
        asyncio.run(run_broker(config, ready))
    except OSError as exc:
        click.echo(f"error: cannot start the broker: {exc.strerror or exc}", err=True)
        sys.exit(1)
