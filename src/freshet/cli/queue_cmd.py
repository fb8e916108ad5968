"""``freshet queue consume | config``: a topic consumed as a work queue by a share group (KIP-932)."""

from __future__ import annotations

import subprocess
import sys
import time

import click

from freshet.client.admin import TopicAdmin
from freshet.client.errors import ClientError
from freshet.client.queue import ACCEPT, REJECT, RELEASE, SHARE_GROUP_CONFIGS, set_group_configs, work_queue

from .common import bootstrap_option, one_line_errors


@click.group()
def queue() -> None:
    """Queues on the log: competing consumers in a share group, each record acknowledged on its own."""


@queue.command("consume")
@click.argument("topic")
@click.option("--group", "-g", required=True, help="The share group: consumers with one group share the records.")
@click.option("--exec", "command", default=None,
              help="Run this shell command per record (the value on stdin): exit 0 accepts the record, any other "
                   "exit releases it for redelivery (--reject-on-failure: rejects it for good).")
@click.option("--reject-on-failure", is_flag=True, help="A failed --exec rejects (archives) the record.")
@click.option("--from-beginning", is_flag=True,
              help="A new group starts at each partition's log start (share.auto.offset.reset=earliest).")
@click.option("--batch", type=int, default=None,
              help="Records one fetch may lock for this consumer (max.poll.records, 500 by default).")
@click.option("--work-ms", type=float, default=0.0, help="Pretend each record takes this long to handle (demos).")
@click.option("--max", "max_records", type=int, default=None, help="Stop after handling this many records.")
@click.option("--idle", "idle_s", type=float, default=None, help="Stop after this many seconds without a record.")
@bootstrap_option
@one_line_errors
def consume(topic: str, group: str, command: str | None, reject_on_failure: bool, from_beginning: bool,
            batch: int | None, work_ms: float, max_records: int | None, idle_s: float | None, bootstrap: str) -> None:
    """Take records of TOPIC as one of GROUP's competing consumers; print each as
    partition, offset, delivery count, key, value (tab-separated), and acknowledge it."""
    if max_records is not None and max_records < 1:
        raise ClientError("--max must be 1 or more")
    TopicAdmin(bootstrap).partition_count(topic)  # a clear error for a topic that does not exist
    if from_beginning:
        set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    out = sys.stdout.buffer

    def handle(m):
        key = m.key() or b""
        out.write(b"%d\t%d\t%d\t%s\t%s\n" % (m.partition(), m.offset(), m.delivery_count(), key, m.value() or b""))
        out.flush()
        if work_ms:
            time.sleep(work_ms / 1000)
        if command is None:
            return ACCEPT
        done = subprocess.run(command, shell=True, input=m.value() or b"", stdout=sys.stderr)
        if done.returncode == 0:
            return ACCEPT
        return REJECT if reject_on_failure else RELEASE

    if batch is not None and batch < 1:
        raise ClientError("--batch must be 1 or more")
    handled = work_queue(bootstrap, group, [topic], handle, max_records=max_records, idle_s=idle_s,
                         overrides={"max.poll.records": batch} if batch else None)
    click.echo(f"{handled} records handled", err=True)


@queue.command("config")
@click.argument("group")
@click.argument("settings", nargs=-1, required=True)
@bootstrap_option
@one_line_errors
def config(group: str, settings: tuple[str, ...], bootstrap: str) -> None:
    """Set GROUP's own configs, as KEY=VALUE (share.auto.offset.reset, share.record.lock.duration.ms,
    share.delivery.count.limit, share.session.timeout.ms, share.heartbeat.interval.ms, share.isolation.level)."""
    configs = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep:
            raise ClientError(f"{setting!r} is not KEY=VALUE (keys: {', '.join(SHARE_GROUP_CONFIGS)})")
        configs[key] = value
    set_group_configs(bootstrap, group, configs)
    for key, value in configs.items():
        click.echo(f"{group}\t{key}={value}")
