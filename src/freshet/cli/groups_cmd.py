"""``freshet groups list | describe | reset-offsets | watch``."""

from __future__ import annotations

import sys
import time

import click
from rich.console import Console
from rich.table import Table

from freshet.client.groups import GroupAdmin
from freshet.client.share_groups import ShareGroupInfo, read_share_groups

from .common import bootstrap_option, one_line_errors
from .records_cmd import _parse_time

ALERT_EXIT = 2


@click.group()
def groups() -> None:
    """Consumer groups and share groups: members, committed offsets, lag, queue state, offset resets."""


@groups.command("list")
@bootstrap_option
@one_line_errors
def list_(bootstrap: str) -> None:
    """Every group with its state and type: consumer groups (classic, or consumer: Kafka 4's protocol) and
    share groups (queues)."""
    shared = read_share_groups(bootstrap)
    for group_id, state, protocol in GroupAdmin(bootstrap).list_groups():
        if group_id not in shared:
            click.echo(f"{group_id}\t{state}\t{protocol}")
    for group_id, info in sorted(shared.items()):
        click.echo(f"{group_id}\t{info.state.upper()}\tshare")


@groups.command("describe")
@click.argument("group")
@bootstrap_option
@one_line_errors
def describe(group: str, bootstrap: str) -> None:
    """Per partition: committed offset, end offset, lag, member (a share group: its queue's state)."""
    shared = read_share_groups(bootstrap)
    if group in shared:
        _describe_share_group(shared[group])
        return
    info = GroupAdmin(bootstrap).describe(group)
    console = Console()
    table = Table(title=f"group {group} ({info.state}, {len(info.members)} members, total lag {info.total_lag})",
                  caption=f"{info.protocol} protocol")
    for col, justify in (("topic", "left"), ("partition", "right"), ("committed", "right"),
                         ("end offset", "right"), ("lag", "right"), ("member", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for p in info.partitions:
        table.add_row(p.topic, str(p.partition), str(p.committed) if p.committed >= 0 else "-",
                      str(p.end_offset), str(p.lag), p.member or "-")
    console.print(table)


def _describe_share_group(info: ShareGroupInfo) -> None:
    console = Console(width=100)
    table = Table(title=f"share group {info.group_id} ({info.state}, {len(info.members)} members, "
                        f"backlog {info.backlog})")
    for col, justify in (("topic", "left"), ("part", "right"), ("start", "right"), ("end", "right"),
                         ("acquired", "right"), ("again", "right"), ("archived", "right"), ("backlog", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for p in info.partitions:
        table.add_row(p.topic, str(p.partition), str(p.start_offset), str(p.high_watermark), str(p.acquired),
                      str(p.available), str(p.archived_total), str(p.backlog))
    console.print(table)
    console.print("acquired: in flight, locked to a consumer; again: given back, to be delivered again; "
                  "archived: rejected or delivered too often, ever; backlog: not yet done, from the start offset")
    for m in info.members:
        console.print(f"member {m['member_id']} client {m['client_id']} at {m['client_host']}, "
                      f"subscribed to {', '.join(m['subscribed'])}")
    for key, value in sorted(info.configs.items()):
        console.print(f"config {key}={value}")


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", required=True)
@click.option("--to-earliest", is_flag=True)
@click.option("--to-latest", is_flag=True)
@click.option("--to-datetime", default=None, help="ISO time: the first offset at or after it.")
@click.option("--shift-by", type=int, default=None, help="Move by N (negative: back).")
@bootstrap_option
@one_line_errors
def reset_offsets(group: str, topic: str, to_earliest: bool, to_latest: bool, to_datetime: str | None,
                  shift_by: int | None, bootstrap: str) -> None:
    """Move GROUP's committed offsets on TOPIC (refused while the group has active members)."""
    plan = GroupAdmin(bootstrap).reset_offsets(
        group, topic, to_earliest=to_earliest, to_latest=to_latest,
        to_timestamp_ms=_parse_time(to_datetime) if to_datetime else None, shift_by=shift_by)
    for partition, old, new in plan:
        click.echo(f"{topic}\t{partition}\t{old if old >= 0 else '-'} -> {new}")


@groups.command("watch")
@click.argument("group")
@click.option("--max-lag", type=int, required=True, help="Alert when any partition's lag exceeds this.")
@click.option("--interval", default=2.0, show_default=True, help="Seconds between checks.")
@click.option("--count", type=int, default=None, help="Stop after this many checks (default: until an alert).")
@bootstrap_option
@one_line_errors
def watch(group: str, max_lag: int, interval: float, count: int | None, bootstrap: str) -> None:
    """Print GROUP's lag every --interval; print an ALERT line and exit 2 when lag exceeds --max-lag."""
    admin = GroupAdmin(bootstrap)
    checks = 0
    while count is None or checks < count:
        info = admin.describe(group)
        worst = max(info.partitions, key=lambda p: p.lag, default=None)
        stamp = time.strftime("%H:%M:%S")
        click.echo(f"{stamp} group {group} total lag {info.total_lag}"
                   + (f", worst {worst.topic}[{worst.partition}] {worst.lag}" if worst else ""))
        if worst is not None and worst.lag > max_lag:
            click.echo(f"ALERT group {group}: lag {worst.lag} on {worst.topic}[{worst.partition}] exceeds {max_lag}")
            sys.exit(ALERT_EXIT)
        checks += 1
        if count is None or checks < count:
            time.sleep(interval)
