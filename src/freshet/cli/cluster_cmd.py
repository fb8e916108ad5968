"""``freshet cluster start|status|stop``: a cluster of Freshet brokers on this machine (issue #46): as many
controllers (Raft, 3 at most) and brokers as asked, each with its own ports and data directory, running until
``freshet cluster stop``. The day-to-day operations of issue #47 (docs/operations.md): ``restart`` (rolling, with
controlled shutdowns), ``elect-leaders`` (ElectLeaders, to any cluster given ``--bootstrap``), ``add-broker``,
``rebalance`` and ``decommission`` (plans of ``controller.placement`` carried out by ``controller.operations``)."""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager

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
@click.option("--racks", default=None, metavar="RACK,RACK,...",
              help="broker.rack of the brokers in turn (broker i gets the ((i-1) mod n)-th): replicas spread over "
                   "racks, and consumers with client.rack read from a follower in theirs (KIP-392).")
@click.option("--endpoint-auth/--no-endpoint-auth", default=True, show_default=True,
              help="The controllers' JSON endpoint asks for the cluster secret (controller.password in the data "
                   "directory), which the brokers and freshet cluster's commands prove.")
@dir_option
@one_line_errors
def start(brokers: int, base_port: int, session_timeout_ms: int, racks: str | None, endpoint_auth: bool,
          directory: str) -> None:
    """Start the controllers and BROKERS brokers on 127.0.0.1; they run until `freshet cluster stop`.
    default.replication.factor is min(3, BROKERS)."""
    if not 1 <= base_port <= 65535 - 300:
        raise ClusterError(f"--base-port {base_port} leaves no room for the cluster's ports")
    if session_timeout_ms < 1000:
        raise ClusterError("--session-timeout-ms must be at least 1000")
    rack_names = [r.strip() for r in (racks or "").split(",")] if racks is not None else []
    if racks is not None and not all(re.fullmatch(r"[A-Za-z0-9._-]+", r) for r in rack_names):
        raise ClusterError(f"--racks {racks!r}: give rack names (letters, digits, '.', '_', '-') separated by commas")
    local = LocalCluster(brokers, directory=directory, base_port=base_port, session_timeout_ms=session_timeout_ms,
                         racks=rack_names, endpoint_auth=endpoint_auth)
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
        state = "unregistered" if b is None else ("fenced" if b["fenced"] else
                                                  "shutting down" if b.get("shutting_down") else "live")
        rack = f"  rack {b['rack']}" if b is not None and b.get("rack") else ""
        rack += "  (decommissioned)" if node.decommissioned else ""
        click.echo(f"broker {node_id}  127.0.0.1:{node.port}  {state:<13} "
                   f"{'running' if node_id in running else 'not running'}{rack}")
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


def cluster_bootstrap(bootstrap: str | None, directory: str) -> str:
    """The brokers a cluster command talks to: ``--bootstrap`` when given, else the local cluster's."""
    if bootstrap:
        return bootstrap
    local = LocalCluster.attach(directory)
    if not local.running_nodes():
        raise ClusterError(f"the cluster in {local.directory} is not running (freshet cluster start, or give "
                           "--bootstrap)")
    return local.bootstrap


bootstrap_option = click.option("--bootstrap", "-b", default=None, envvar="FRESHET_BOOTSTRAP",
                                help="The cluster's brokers (env FRESHET_BOOTSTRAP); default: the cluster in "
                                     "--data-dir.")


@cluster.command("elect-leaders")
@click.option("--topic", default=None, help="Only this topic's partitions (default: every partition).")
@click.option("--partition", "partitions", type=click.IntRange(0), multiple=True,
              help="Only this partition of --topic (repeatable).")
@click.option("--unclean", is_flag=True,
              help="Unclean election: a live replica outside the ISR leads a partition that has no leader "
                   "(acknowledged records it lacks are lost). Default: preferred (the first replica, from the ISR).")
@bootstrap_option
@dir_option
@one_line_errors
def elect_leaders(topic: str | None, partitions: tuple[int, ...], unclean: bool, bootstrap: str | None,
                  directory: str) -> None:
    """Move leadership to each partition's preferred replica (the first one) when it is in the ISR, as
    kafka-leader-election.sh --election-type PREFERRED; one line per partition elected or refused."""
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient

    if partitions and not topic:
        raise ClusterError("--partition needs --topic")
    client = AdminClient({"bootstrap.servers": cluster_bootstrap(bootstrap, directory), "socket.timeout.ms": 30000,
                          "log_level": 0})
    wanted = None
    if topic:
        found = client.list_topics(topic, timeout=30).topics.get(topic)
        if found is None or found.error is not None:
            raise ClusterError(f"topic {topic!r} does not exist")
        missing = sorted(set(partitions) - set(found.partitions))
        if missing:
            raise ClusterError(f"topic {topic!r} has no partition {missing[0]} (it has {len(found.partitions)})")
        wanted = [TopicPartition(topic, p) for p in (partitions or sorted(found.partitions))]
    kind = ElectionType.UNCLEAN if unclean else ElectionType.PREFERRED
    results = client.elect_leaders(kind, wanted).result(90)  # (its request_timeout: a SystemError in 2.16)
    elected, failed = 0, 0
    for tp, error in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        where = f"{tp.topic}-{tp.partition}"
        if error is None:
            elected += 1
            click.echo(f"{where}: elected")
            continue
        err = error.args[0] if getattr(error, "args", None) else error
        name = err.name() if hasattr(err, "name") else str(err)
        failed += name != "ELECTION_NOT_NEEDED"
        click.echo(f"{where}: {name} ({err.str() if hasattr(err, 'str') else err})")
    left_out = "" if wanted is not None else " (partitions led by their preferred replica already are left out)"
    click.echo(f"{elected} partition(s) elected, {len(results) - elected} not{left_out}")
    if failed:
        sys.exit(1)


def _operations(directory: str):
    from freshet.controller.operations import Operations

    local = LocalCluster.attach(directory)
    if not local.running_controllers():
        raise ClusterError(f"the cluster in {local.directory} is not running (freshet cluster start)")
    return local, Operations(local.controller_addresses, password=local.password)


@cluster.command("add-broker")
@dir_option
@one_line_errors
def add_broker(directory: str) -> None:
    """Start one more broker in the local cluster (the next node id). It takes partitions once they are moved to
    it: freshet cluster rebalance --apply."""
    local = LocalCluster.attach(directory)
    if not local.running_controllers():
        raise ClusterError(f"the cluster in {local.directory} is not running (freshet cluster start)")
    node_id = local.add_broker()
    click.echo(f"broker {node_id} running on {local.bootstrap_of(node_id)}, holding no partition yet "
               "(freshet cluster rebalance --apply moves some to it)")


throttle_option = click.option(
    "--throttle", type=click.IntRange(1), default=None, metavar="BYTES_PER_S",
    help="Replication throttle while partitions move (leader/follower.replication.throttled.rate on the brokers "
         "involved, as kafka-reassign-partitions --throttle); removed once the moves are done.")


@contextmanager
def _throttled(bootstrap: str, plan: dict, rate: int | None):
    """The reassignment throttle for ``plan`` while the block runs (freshet.client.reassignment's)."""
    if rate is None or not plan:
        yield
        return
    from freshet.client.reassignment import ReassignmentAdmin

    admin = ReassignmentAdmin(bootstrap)
    brokers = admin.set_throttle(plan, rate)
    click.echo(f"throttle: {rate} bytes/s on brokers {', '.join(map(str, brokers))}")
    try:
        yield
    finally:
        admin.clear_throttle(sorted({t for t, _ in plan}), brokers)
        admin.close()
        click.echo("throttle removed")


@cluster.command("decommission")
@click.argument("broker", type=int)
@throttle_option
@dir_option
@one_line_errors
def decommission(broker: int, throttle: int | None, directory: str) -> None:
    """Move every replica off BROKER (reassignments: the new replicas catch up before it is dropped), stop it
    and unregister it (UnregisterBroker). Refused, changing nothing, when a partition would be left with fewer
    live brokers than its replication factor."""
    from freshet.controller.placement import PlanError

    local, ops = _operations(directory)
    if broker not in local.nodes or local.nodes[broker].decommissioned:
        raise ClusterError(f"broker {broker} is not a broker of the cluster in {local.directory}")
    try:
        plan = ops.decommission_plan(broker)
        with _throttled(local.bootstrap, plan, throttle):
            ops.apply(plan, progress=click.echo)
        ops.retire(broker, stop=local.decommissioned, progress=click.echo)
    except PlanError as exc:
        raise ClusterError(str(exc)) from None
    click.echo(f"broker {broker} decommissioned: {len(plan)} partition(s) moved off it")


@cluster.command("rebalance")
@click.option("--apply", "apply_plan", is_flag=True, help="Carry the plan out (default: only print it).")
@throttle_option
@dir_option
@one_line_errors
def rebalance(apply_plan: bool, throttle: int | None, directory: str) -> None:
    """Propose an even spread (replicas and preferred leaders per live broker within one of the mean, as Cruise
    Control's simplest goal) and print it; with --apply, reassign the partitions and elect their preferred
    leaders."""
    from freshet.controller.placement import PlanError, balance_counts, balanced

    local, ops = _operations(directory)
    snapshot, plan = ops.rebalance()
    before = balance_counts(snapshot)
    current = {(t["name"], p["partition"]): p["replicas"] for t in snapshot["topics"] for p in t["partitions"]}
    after = balance_counts(snapshot, {**current, **plan})
    for (topic, index), replicas in sorted(plan.items()):
        click.echo(f"{topic}-{index}: {current[(topic, index)]} -> {replicas}")
    for label, (replicas, leaders) in (("now", before), ("planned", after)):
        click.echo(f"{label}: replicas per broker {_counts(replicas)}, preferred leaders {_counts(leaders)}"
                   f"{'' if balanced(replicas) and balanced(leaders) else ' (not within one of the mean)'}")
    if not plan:
        click.echo("nothing to move")
        return
    if not apply_plan:
        click.echo(f"{len(plan)} partition(s) to move: freshet cluster rebalance --apply")
        return
    try:
        with _throttled(local.bootstrap, plan, throttle):
            ops.apply(plan, progress=click.echo)
    except PlanError as exc:
        raise ClusterError(str(exc)) from None
    click.echo(f"{len(plan)} partition(s) moved")


def _counts(counts: dict[int, int]) -> str:
    return " ".join(f"{b}:{n}" for b, n in sorted(counts.items()))


@cluster.command("restart")
@click.option("--broker", "brokers", type=int, multiple=True, help="Only this broker (repeatable); default: all.")
@dir_option
@one_line_errors
def restart(brokers: tuple[int, ...], directory: str) -> None:
    """Rolling restart: each broker in turn stopped with SIGTERM (controlled shutdown: its leaderships move to
    other ISR members first) and started again, the next one only once every partition has its whole ISR."""
    local = LocalCluster.attach(directory)
    if not local.running_controllers():
        raise ClusterError(f"the cluster in {local.directory} is not running (freshet cluster start)")
    members = sorted(n.node_id for n in local.state.nodes if not n.decommissioned)
    unknown = sorted(set(brokers) - set(members))
    if unknown:
        raise ClusterError(f"broker {unknown[0]} is not a broker of the cluster in {local.directory}")
    for node_id in brokers or members:
        local.wait_until(local.fully_replicated, 300, "every partition's whole ISR")
        local.restart(node_id, 300)
        click.echo(f"broker {node_id} restarted")
    local.wait_until(local.fully_replicated, 300, "every partition's whole ISR")
    click.echo("every partition has its whole ISR")
