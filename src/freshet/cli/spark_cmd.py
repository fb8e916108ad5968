"""``freshet spark start-cluster|status|start-connect|stop-connect|stop-cluster``: a Spark standalone cluster and a
Spark Connect server on this machine, for ``freshet run --master`` and ``freshet run --remote``."""

from __future__ import annotations

import os

import click

from freshet.local.spark_cluster import SparkCluster, SparkClusterError

from .common import one_line_errors

dir_option = click.option("--dir", "directory", default="spark-cluster", show_default=True,
                          envvar="FRESHET_SPARK_CLUSTER_DIR",
                          help="Where the cluster keeps its state, logs and work directories (env FRESHET_SPARK_CLUSTER_DIR).")


def _running(directory: str) -> SparkCluster:
    cluster = SparkCluster(directory)
    if not cluster.attach():
        raise SparkClusterError(f"no Spark cluster is running in {os.path.abspath(directory)} "
                                "(freshet spark start-cluster)")
    return cluster


@click.group()
def spark() -> None:
    """A Spark standalone cluster (master and workers) and a Spark Connect server on this machine."""


@spark.command("start-cluster")
@click.option("--workers", default=2, show_default=True, type=int, help="How many workers.")
@click.option("--cores", default=max(1, (os.cpu_count() or 2) // 2), show_default=True, type=int,
              help="Cores each worker offers.")
@click.option("--memory", default="2g", show_default=True, help="Memory each worker offers its executors.")
@click.option("--port", default=7077, show_default=True, type=int, help="The master's port (0: a free one).")
@click.option("--ui-port", default=8080, show_default=True, type=int, help="The master's web UI (0: a free one).")
@dir_option
@one_line_errors
def start_cluster(workers: int, cores: int, memory: str, port: int, ui_port: int, directory: str) -> None:
    """Start a master and WORKERS workers on 127.0.0.1; they run until stop-cluster."""
    cluster = SparkCluster(directory, workers=workers, cores=cores, memory=memory, master_port=port or None,
                           master_ui_port=ui_port or None)
    cluster.start()
    click.echo(f"Spark master {cluster.master_url} with {workers} worker(s) x {cores} core(s); "
               f"UI {cluster.master_ui}; logs in {cluster.directory}")
    click.echo(f"run a pipeline on it: freshet run PIPELINE --master {cluster.master_url} ...")


@spark.command("status")
@dir_option
@one_line_errors
def status(directory: str) -> None:
    """The master, its workers (alive or not, cores used), running applications and the Connect server."""
    cluster = _running(directory)
    seen = cluster.status()
    click.echo(f"master   {cluster.master_url}  UI {cluster.master_ui}  status {seen.get('status', '?')}")
    for w in seen.get("workers", []):
        click.echo(f"worker   {w['host']}:{w['port']}  {w['state']:<6} cores {w['coresused']}/{w['cores']}  "
                   f"UI {w.get('webuiaddress', '')}")
    for app in seen.get("activeapps", []):
        click.echo(f"app      {app['name']}  {app['state']}  cores {app.get('cores', '?')}  id {app['id']}")
    state = cluster.state
    if state.connect_url:
        click.echo(f"connect  {state.connect_url}  UI http://{state.host}:{state.connect_ui_port}")


@spark.command("start-connect")
@click.option("--port", default=15002, show_default=True, type=int, help="The server's port (0: a free one).")
@click.option("--cores", default=None, type=int,
              help="Cluster cores the server holds (default all; leave some for freshet run --master jobs).")
@dir_option
@one_line_errors
def start_connect(port: int, cores: int | None, directory: str) -> None:
    """Start a Spark Connect server on the cluster: freshet run --remote sc://... runs pipelines through it."""
    cluster = _running(directory)
    url = cluster.start_connect(port or None, cores)
    click.echo(f"Spark Connect server {url} on {cluster.master_url}")
    click.echo(f"run a pipeline through it: freshet run PIPELINE --remote {url} ...")


@spark.command("stop-connect")
@dir_option
@one_line_errors
def stop_connect(directory: str) -> None:
    """Stop the cluster's Spark Connect server."""
    _running(directory).stop_connect()
    click.echo("Spark Connect server stopped")


@spark.command("stop-cluster")
@dir_option
@one_line_errors
def stop_cluster(directory: str) -> None:
    """Stop the Connect server, the workers (and their executors) and the master."""
    _running(directory).stop()
    click.echo("Spark cluster stopped")
