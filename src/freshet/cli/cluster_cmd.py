"""``freshet cluster start|status|stop``: a cluster of Freshet brokers on this machine (issue #46): as many
controllers (Raft, 3 at most) and brokers as asked, each with its own ports and data directory, running until
``freshet cluster stop``."""

from __future__ import annotations

import click

from freshet.local.cluster import ClusterError, LocalCluster

from .common import one_line_errors

dir_option = click.option("--data-dir", "directory", default="freshet-cluster", show_default=True,
                          envvar="FRESHET_CLUSTER_DIR",
                          help="Where the cluster keeps its state (cluster.json), logs and data (env FRESHET_CLUSTER_DIR).")


@click.group()
def cluster() -> None:
    """A cluster of Freshet brokers and controllers on this machine."""


@cluster.command("start")
@click.option("--brokers", default=3, show_default=True, type=click.IntRange(1, 9), help="How many brokers.")
@click.option("--base-port", default=9092, show_default=True, type=int,
              help="Broker i listens on BASE+i-1, controller i's endpoint on BASE+100+i-1, its Raft on BASE+200+i-1.")
@click.option("--session-timeout-ms", default=9000, show_default=True, type=int,
              help="broker.session.timeout.ms: a broker silent this long is fenced (one killed is fenced at once).")
@dir_option
@one_line_errors
def start(brokers: int, base_port: int, session_timeout_ms: int, directory: str) -> None:
    """Start the controllers and BROKERS brokers on 127.0.0.1; they run until `freshet cluster stop`.
    default.replication.factor is min(3, BROKERS)."""
    if not 1 <= base_port <= 65535 - 300:
        raise ClusterError(f"--base-port {base_port} leaves no room for the cluster's ports")
    if session_timeout_ms < 1000:
        raise ClusterError("--session-timeout-ms must be at least 1000")
    local = LocalCluster(brokers, directory=directory, base_port=base_port, session_timeout_ms=session_timeout_ms)
    local.start()
    metadata = local.metadata()
    click.echo(f"{brokers} broker(s) and {len(local.controller_addresses)} controller(s) running, active controller "
               f"{metadata['controller_id']}; data and logs in {local.directory}")
    click.echo(f"bootstrap servers: {local.bootstrap}")


@cluster.command("status")
@dir_option
@one_line_errors
def status(directory: str) -> None:
    """The active controller, every broker (live or fenced), and the partitions under-replicated or offline."""
    local = LocalCluster.attach(directory)
    if not local.running_controllers():
        raise ClusterError(f"the cluster in {local.directory} is not running (freshet cluster start)")
    metadata = local.metadata()
    click.echo(f"controller {metadata['controller_id']} active (of {len(local.controller_addresses)}), "
               f"metadata offset {metadata['offset']}")
    running_controllers = set(local.running_controllers())
    for node_id, node in sorted(local.nodes.items()):
        if node.controller_port:
            state = "active" if node_id == metadata["controller_id"] else "voter"
            click.echo(f"controller {node_id}  127.0.0.1:{node.controller_port}  {state:<12} "
                       f"{'running' if node_id in running_controllers else 'not running'}")
    registered = {b["broker_id"]: b for b in metadata["brokers"]}
    running = set(local.running_nodes())
    for node_id, node in sorted(local.nodes.items()):
        b = registered.get(node_id)
        state = "unregistered" if b is None else ("fenced" if b["fenced"] else "live")
        click.echo(f"broker {node_id}  127.0.0.1:{node.port}  {state:<12} "
                   f"{'running' if node_id in running else 'not running'}")
    under, offline, total = [], [], 0
    for topic in metadata["topics"]:
        for p in topic["partitions"]:
            total += 1
            where = f"{topic['name']}-{p['partition']}"
            if p["leader"] < 0:
                offline.append(where)
            elif len(p["isr"]) < len(p["replicas"]):
                under.append(where)
    click.echo(f"{len(metadata['topics'])} topic(s), {total} partition(s): {len(under)} under-replicated"
               f"{' (' + ', '.join(under[:10]) + ')' if under else ''}, {len(offline)} offline"
               f"{' (' + ', '.join(offline[:10]) + ')' if offline else ''}")


@cluster.command("stop")
@dir_option
@one_line_errors
def stop(directory: str) -> None:
    """Stop every broker, then every controller (their data stays in the directory)."""
    local = LocalCluster.attach(directory)
    local.stop()
    click.echo(f"stopped the cluster in {local.directory}")
