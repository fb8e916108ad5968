"""``freshet dashboard`` and ``freshet pipelines list | stop``."""

from __future__ import annotations

import secrets
import sys

import click

from .common import bootstrap_option, one_line_errors


@click.command()
@click.option("--port", default=8080, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Anything but loopback needs a token.")
@click.option("--token", envvar="FRESHET_DASHBOARD_TOKEN", default=None,
              help="Required on every request (?token= or Authorization: Bearer); generated when binding elsewhere.")
@click.option("--lag-alert", default=1000, show_default=True,
              help="Partition lag above which a group shows an alert.")
@click.option("--group-lag-alert", "group_alerts", multiple=True, metavar="GROUP=N",
              help="A group's own threshold (repeatable).")
@click.option("--broker-metrics", "broker_metrics", multiple=True, metavar="URL",
              help="A broker's Prometheus endpoint (freshet broker start --metrics-port), for segment counts "
                   "per partition and clients' traffic (repeatable; sizes come from DescribeLogDirs without it).")
@click.option("--login", is_flag=True,
              help="Browsers sign in with a Kafka user (checked by SASL against the cluster); needs the dashboard's "
                   "own connection to use SASL (FRESHET_SECURITY_PROTOCOL / --command-config).")
@bootstrap_option
def dashboard(port: int, host: str, token: str | None, lag_alert: int, group_alerts: tuple[str, ...],
              broker_metrics: tuple[str, ...], login: bool, bootstrap: str) -> None:
    """Serve the web dashboard: topics, groups and lag, pipelines, live charts, /metrics."""
    import uvicorn

    from freshet.dashboard.app import create_app
    from freshet.dashboard.collector import Collector

    if login:
        from freshet.client.config import security_config

        if not str(security_config().get("security.protocol", "")).upper().startswith("SASL"):
            click.echo("error: --login checks users against the cluster by SASL: give the dashboard SASL settings "
                       "(FRESHET_SECURITY_PROTOCOL=SASL_SSL, ... or --command-config)", err=True)
            sys.exit(1)
    if host not in ("127.0.0.1", "localhost", "::1") and not token and not login:
        token = secrets.token_urlsafe(16)
    thresholds = {}
    for item in group_alerts:
        group, sep, value = item.rpartition("=")
        if not sep or not group or not value.isdigit():
            click.echo(f"error: --group-lag-alert takes GROUP=N, got {item!r}", err=True)
            sys.exit(1)
        thresholds[group] = int(value)
    for url in broker_metrics:
        if not url.startswith(("http://", "https://")):
            click.echo(f"error: --broker-metrics takes an http(s) URL, got {url!r}", err=True)
            sys.exit(1)
    listener = _listen(host, port)  # before anything starts or the address is announced
    port = listener.getsockname()[1]  # --port 0: the one the system chose
    collector = Collector(bootstrap, lag_threshold=lag_alert, group_thresholds=thresholds,
                          broker_metrics=list(broker_metrics)).start()
    url = f"http://{host}:{port}/" + (f"?token={token}" if token else "")
    click.echo(f"freshet dashboard on {url}", err=True)
    try:
        # live event streams stay open: do not let them hold a shutdown up for long
        from freshet.dashboard.login import KafkaLogin

        from freshet.sql.http import SqlEndpoint  # POST /sql; Spark starts at the first statement that needs it

        app = create_app(collector, token, KafkaLogin(bootstrap) if login else None, SqlEndpoint(bootstrap))
        uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                      timeout_graceful_shutdown=3)).run(sockets=[listener])
    finally:
        listener.close()
        collector.stop()


def _listen(host: str, port: int):
    """The dashboard's listening socket, bound here: an address in use is one line and exit 1 (uvicorn binding
    it itself logs an ERROR after the address was announced and exits 3)."""
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listener = socket.socket(family, kind, proto)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(address)
        except OSError:
            listener.close()
            raise
    except OSError as exc:
        click.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        sys.exit(1)
    return listener


@click.group()
def pipelines() -> None:
    """Pipelines registered by freshet run."""


@pipelines.command("list")
@bootstrap_option
@one_line_errors
def list_(bootstrap: str) -> None:
    from freshet.client.pipeline_registry import read_pipelines

    for name, p in sorted(read_pipelines(bootstrap).items()):
        progress = p.get("progress") or {}
        click.echo(f"{name}\t{p.get('status')}\tbatch {progress.get('batch_id', '-')}\t"
                   f"{progress.get('input_rows_per_second') or 0:.0f} rows/s")


@pipelines.command("stop")
@click.argument("name")
@bootstrap_option
@one_line_errors
def stop(name: str, bootstrap: str) -> None:
    from freshet.client import ClientError
    from freshet.client.pipeline_registry import read_pipelines, request_stop

    known = read_pipelines(bootstrap)
    if name not in known:
        raise ClientError(f"no pipeline named {name!r} has registered")
    request_stop(bootstrap, name)
    click.echo(f"asked {name} to stop")
