"""``freshet topic create | list | describe | delete | add-partitions``."""

from __future__ import annotations

import click

from freshet.client import ClientError, TopicAdmin

from .common import bootstrap_option, one_line_errors


INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state", "__share_group_state")  # Kafka's Topic.isInternal


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


def _parse_replica_assignment(text: str) -> list[list[int]]:
    """kafka-topics' ``--replica-assignment``: partitions separated by commas, each partition's broker ids by
    colons, the preferred leader first (``1:2,2:3`` = partition 0 on brokers 1 and 2, partition 1 on 2 and 3)."""
    assignment = []
    for index, part in enumerate(text.split(",")):
        try:
            brokers = [int(b) for b in part.split(":")]
        except ValueError:
            raise ClientError(f"--replica-assignment takes broker ids as 1:2,2:3 (partitions by commas, replicas "
                              f"by colons); partition {index} is {part.strip()!r}") from None
        assignment.append(brokers)
    return assignment


@topic.command("create")
@click.argument("name")
@click.option("--partitions", "-p", type=int, help="Number of partitions.  [default: 1]")
@click.option("--replication-factor", "-r", type=int,
              help="How many brokers hold each partition, as kafka-topics takes it.  [default: the cluster's "
                   "default.replication.factor]")
@click.option("--replica-assignment", metavar="B:B,B:B",
              help="The brokers of each partition, as kafka-topics takes them: partitions separated by commas, "
                   "each one's broker ids by colons, the first one leading (1:2,2:3). Not with --partitions or "
                   "--replication-factor.")
@click.option("--config", "-c", "configs", multiple=True, metavar="NAME=VALUE",
              help="Topic config, e.g. retention.ms=60000 or cleanup.policy=compact (repeatable).")
@bootstrap_option
@one_line_errors
def create(name: str, partitions: int | None, replication_factor: int | None, replica_assignment: str | None,
           configs: tuple[str, ...], bootstrap: str) -> None:
    """Create topic NAME."""
    assignment = None
    if replica_assignment is not None:
        if partitions is not None or replication_factor is not None:
            given = "--partitions" if partitions is not None else "--replication-factor"
            raise ClientError(f"--replica-assignment gives the partitions and their replicas: it cannot be used "
                              f"with {given}")
        assignment = _parse_replica_assignment(replica_assignment)
        partitions = len(assignment)
    elif partitions is None:
        partitions = 1
    if replication_factor is not None and replication_factor < 1:
        raise ClientError(f"--replication-factor must be 1 or more, got {replication_factor}")
    TopicAdmin(bootstrap).create_topic(name, partitions, _parse_configs(configs), replica_assignment=assignment,
                                       replication_factor=-1 if replication_factor is None else replication_factor)
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
    """Partitions (leader, replicas and ISR as kafka-topics --describe shows them, log start offset, high
    watermark, size on disk) and configs of topic NAME."""
    from rich.console import Console  # imported here: the other topic commands start faster without it
    from rich.table import Table

    info = TopicAdmin(bootstrap).describe_topic(name)
    console = Console()
    if not console.is_terminal:  # a pipe or a file: rows whole, not wrapped at rich's default 80 columns
        console.width = 160
    table = Table(title=f"topic {name}")
    for col in ("partition", "leader", "replicas", "isr", "log start offset", "high watermark", "records", "size"):
        table.add_column(col, justify="right")
    for p in info.partitions:
        table.add_row(str(p.partition), str(p.leader), ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)),
                      str(p.log_start_offset), str(p.high_watermark), str(p.records), _size(p.size_bytes))
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
    if name in INTERNAL_TOPICS:  # as kafka-topics.sh checks it (the broker's answer reads "Invalid request")
        raise ClientError(f"topic {name} is an internal topic and is not allowed to be deleted")
    TopicAdmin(bootstrap).delete_topic(name)
    click.echo(f"deleted topic {name}")


@topic.command("add-partitions")
@click.argument("name")
@click.option("--total", required=True, type=int, help="The new partition count.")
@click.option("--replica-assignment", metavar="B:B,B:B",
              help="The brokers of each partition added, as kafka-topics --alter takes them (1:2,2:3: the first of "
                   "the new partitions on brokers 1 and 2, the next on 2 and 3), the first one leading.")
@bootstrap_option
@one_line_errors
def add_partitions(name: str, total: int, replica_assignment: str | None, bootstrap: str) -> None:
    """Grow topic NAME to --total partitions."""
    assignment = _parse_replica_assignment(replica_assignment) if replica_assignment is not None else None
    TopicAdmin(bootstrap).add_partitions(name, total, replica_assignment=assignment)
    click.echo(f"topic {name} now has {total} partitions")


@topic.command("reassign")
@click.argument("name", required=False)
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False),
              help='A kafka-reassign-partitions.sh plan: {"version":1,"partitions":[{"topic":..,"partition":..,'
                   '"replicas":[..]}]}.')
@click.option("--throttle", type=int, metavar="BYTES_PER_S",
              help="Hold the move's replication to this many bytes/s per broker (leader and follower side).")
@click.option("--status", "status", is_flag=True,
              help="Progress of the moves (the plan's, else every one): each new replica's lag. Once the plan's "
                   "moves are done, their throttle is removed.")
@click.option("--cancel", is_flag=True,
              help="Cancel the plan's moves in progress (without --plan: every move in progress, of NAME if given): "
                   "back to the original replicas; the throttle is removed.")
@bootstrap_option
@one_line_errors
def reassign(name: str | None, plan_path: str | None, throttle: int | None, status: bool, cancel: bool,
             bootstrap: str) -> None:
    """Move partitions to other brokers (of topic NAME only, when given), as kafka-reassign-partitions.sh does:
    the new replicas catch up and join the ISR, then the old ones are dropped."""
    from freshet.client.reassignment import ReassignmentAdmin, ReassignmentRefused, read_plan

    if sum((status, cancel)) > 1 or not (plan_path or status or cancel):
        raise ClientError("give --plan FILE to start moves, --status or --cancel (one of them)")
    if throttle is not None and (status or cancel or throttle <= 0):
        raise ClientError("--throttle takes a positive rate in bytes/s, with --plan to start moves")
    plan = read_plan(plan_path, name) if plan_path else None
    admin = ReassignmentAdmin(bootstrap)
    try:
        if status:
            _status(admin, name, plan)
        elif cancel:  # as kafka-reassign-partitions --cancel: the moves in progress, then no throttle
            keys = [(m.topic, m.partition) for m in admin.ongoing(name) if not plan or (m.topic, m.partition) in plan]
            if not keys:
                raise ClientError("no reassignment of the plan's partitions is in progress" if plan else
                                  f"no reassignment in progress{' of topic ' + name if name else ''}")
            admin.alter({key: None for key in keys})
            click.echo(f"cancelled the reassignment of {len(keys)} partition{'s' if len(keys) != 1 else ''}: "
                       f"{_keys(keys)}")
            admin.clear_throttle(sorted({t for t, _ in (plan or keys)}), admin.broker_ids())
            click.echo("throttle removed (if one was set)")
        else:
            if throttle is not None:  # before the move starts, as kafka-reassign-partitions does
                brokers = admin.set_throttle(plan, throttle)
            try:
                admin.alter(plan)
            except ReassignmentRefused as exc:
                if throttle is not None and (exc.refused is None or exc.refused >= set(plan)):
                    admin.clear_throttle(sorted({t for t, _ in plan}), brokers)  # nothing moves: no throttle
                raise
            if throttle is not None:
                click.echo(f"throttle: {throttle} bytes/s on brokers {', '.join(map(str, brokers))}")
            click.echo(f"reassigning {len(plan)} partition{'s' if len(plan) != 1 else ''}: "
                       + ", ".join(f"{t}-{p} -> {r}" for (t, p), r in sorted(plan.items())))
            click.echo("follow it with: freshet topic reassign --status" + (f" --plan {plan_path}"))
    finally:
        admin.close()


def _keys(keys) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(keys))


def _status(admin, name: str | None, plan: dict | None) -> None:
    moving = admin.progress(admin.ongoing(name))
    wanted = set(plan) if plan else None
    shown = [m for m in moving if wanted is None or (m.topic, m.partition) in wanted]
    for m in shown:
        total = m.progress.get(-1, (0, None))[1]
        parts = []
        for r in m.adding:
            if r in m.progress:
                lag, size = m.progress[r]
                parts.append(f"broker {r}: {lag} records behind, {_size(size)} of {_size(total)}")
            else:
                parts.append(f"broker {r}: not answering")
        click.echo(f"{m.topic}-{m.partition}: in progress, replicas {m.replicas} -> {m.target}"
                   + (f"; {'; '.join(parts)}" if parts else f"; removing {m.removing}"))
    if plan is None:
        if not shown:
            click.echo(f"no reassignment in progress{' of topic ' + name if name else ''}")
        return
    current = admin.current_replicas(list(plan))
    for key in sorted(set(plan) - {(m.topic, m.partition) for m in shown}):
        done = current.get(key) == plan[key] or sorted(current.get(key, [])) == sorted(plan[key])
        click.echo(f"{key[0]}-{key[1]}: {'complete' if done else 'not in progress'}, replicas {current.get(key)}")
    if not shown:
        admin.clear_throttle(sorted({t for t, _ in plan}), admin.broker_ids())
        click.echo("throttle removed (if one was set)")
