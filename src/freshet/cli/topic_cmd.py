"""``freshet topic create | list | describe | delete | add-partitions``."""

from __future__ import annotations

import click

from freshet.client import ClientError, TopicAdmin

from .common import bootstrap_option, one_line_errors


def _parse_configs(pairs: tuple[str, ...]) -> dict[str, str]:
    configs = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ClientError(f"--config takes name=value, got {pair!r}")
        configs[name.strip()] = value.strip()
    return configs


@click.group()
def topic() -> None:
    """Create, list, describe and delete topics."""


@topic.command("create")
@click.argument("name")
@click.option("--partitions", "-p", default=1, show_default=True, type=int)
@click.option("--config", "-c", "configs", multiple=True, metavar="NAME=VALUE",
              help="Topic config, e.g. retention.ms=60000 or cleanup.policy=compact (repeatable).")
@bootstrap_option
@one_line_errors
def create(name: str, partitions: int, configs: tuple[str, ...], bootstrap: str) -> None:
    """Create topic NAME."""
    TopicAdmin(bootstrap).create_topic(name, partitions, _parse_configs(configs))
    click.echo(f"created topic {name} with {partitions} partition{'s' if partitions != 1 else ''}")


@topic.command("list")
@bootstrap_option
@one_line_errors
def list_(bootstrap: str) -> None:
    """List topics with their partition counts."""
    for name, count in TopicAdmin(bootstrap).list_topics().items():
        click.echo(f"{name}\t{count}")


@topic.command("describe")
@click.argument("name")
@bootstrap_option
@one_line_errors
def describe(name: str, bootstrap: str) -> None:
    """Partitions (log start offset, high watermark, size on disk) and configs of topic NAME."""
    from rich.console import Console  # imported here: the other topic commands start faster without it
    from rich.table import Table

    info = TopicAdmin(bootstrap).describe_topic(name)
    console = Console()
    table = Table(title=f"topic {name}")
    for col in ("partition", "leader", "log start offset", "high watermark", "records", "size"):
        table.add_column(col, justify="right")
    for p in info.partitions:
        table.add_row(str(p.partition), str(p.leader), str(p.log_start_offset), str(p.high_watermark),
                      str(p.records), _size(p.size_bytes))
    console.print(table)
    configs = Table(title="configs")
    configs.add_column("name")
    configs.add_column("value")
    configs.add_column("source")
    for key, (value, is_default) in info.configs.items():
        configs.add_row(key, value, "default" if is_default else "topic")
    console.print(configs)


def _size(size_bytes: int | None) -> str:
    if size_bytes is None:
        return "-"
    if size_bytes < 1024:
        return f"{size_bytes} B"
    size = float(size_bytes)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"


@topic.command("delete")
@click.argument("name")
@bootstrap_option
@one_line_errors
def delete(name: str, bootstrap: str) -> None:
    """Delete topic NAME and all its records."""
    TopicAdmin(bootstrap).delete_topic(name)
    click.echo(f"deleted topic {name}")


@topic.command("add-partitions")
@click.argument("name")
@click.option("--total", required=True, type=int, help="The new partition count.")
@bootstrap_option
@one_line_errors
def add_partitions(name: str, total: int, bootstrap: str) -> None:
    """Grow topic NAME to --total partitions."""
    TopicAdmin(bootstrap).add_partitions(name, total)
    click.echo(f"topic {name} now has {total} partitions")
