from __future__ import annotations

import click


@click.group()
def topic() -> None:
    """Create, list, describe and delete topics."""
