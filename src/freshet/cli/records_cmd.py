from __future__ import annotations

import click


@click.command()
def produce() -> None:
    """Produce records."""


@click.command()
def consume() -> None:
    """Consume records."""
