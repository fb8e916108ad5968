"""``freshet ingest serve`` (HTTP, syslog, StatsD in) and ``freshet webhook`` (a topic out to a URL)."""

from __future__ import annotations

import sys

import click

from freshet.client import ClientError

from .common import bootstrap_option, one_line_errors, stopping_on_signals


@click.group()
def ingest() -> None:
    """Events in without a Kafka client: HTTP (REST Proxy v2/v3, beacons), syslog, StatsD."""


@ingest.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address every endpoint listens on.")
@click.option("--http-port", type=int, default=8082, show_default=True,
              help="REST Proxy v3/v2 produce, /beacon/TOPIC, /metrics.")
@click.option("--syslog-udp", "syslog_udp", type=int, default=None, help="Syslog over UDP on this port.")
@click.option("--syslog-tcp", "syslog_tcp", type=int, default=None, help="Syslog over TCP (RFC 6587) on this port.")
@click.option("--syslog-topic", default="syslog", show_default=True)
@click.option("--statsd", "statsd_port", type=int, default=None, help="StatsD over UDP on this port.")
@click.option("--statsd-topic", default="metrics", show_default=True)
@click.option("--buffer", "max_buffered", type=click.IntRange(1), default=100_000, show_default=True,
              help="Records handed to the log and not yet acknowledged, at most; then each endpoint's policy.")
@click.option("--http-policy", type=click.Choice(["reject", "wait"]), default="reject", show_default=True,
              help="When the buffer is full: answer 429/503 with Retry-After at once, or hold the request first.")
@click.option("--http-wait", type=float, default=5.0, show_default=True, help="Seconds a request is held (policy wait).")
@click.option("--tcp-policy", type=click.Choice(["block", "drop"]), default="block", show_default=True,
              help="Syslog over TCP when the buffer is full: stop reading (the sender waits), or drop and count.")
@click.option("--ack-timeout", type=float, default=30.0, show_default=True,
              help="Seconds an HTTP request waits for the log's acknowledgement before a 503.")
@click.option("--cors-origin", "cors_origins", multiple=True, default=["*"], show_default=True,
              help="Origins whose pages may POST (beacons, fetch); repeat for several.")
@click.option("--name", default=None, help="This server's name on the dashboard (default host-pid).")
@bootstrap_option
@one_line_errors
def serve(host, http_port, syslog_udp, syslog_tcp, syslog_topic, statsd_port, statsd_topic, max_buffered,
          http_policy, http_wait, tcp_policy, ack_timeout, cors_origins, name, bootstrap) -> None:
    """Run the ingest endpoints in front of the log until Ctrl-C."""
    from freshet.ingest.http_app import HttpSettings
    from freshet.ingest.server import IngestServer, IngestSettings

    settings = IngestSettings(
        bootstrap=bootstrap, host=host, http_port=http_port, syslog_udp_port=syslog_udp, syslog_tcp_port=syslog_tcp,
        statsd_port=statsd_port, syslog_topic=syslog_topic, statsd_topic=statsd_topic, max_buffered=max_buffered,
        syslog_tcp_policy=tcp_policy,
        http=HttpSettings(policy=http_policy, wait_s=http_wait, ack_timeout_s=ack_timeout,
                          cors_origins=tuple(cors_origins)))
    if name:
        settings.name = name
    server = IngestServer(settings)
    click.echo(f"ingest {settings.name}: HTTP http://{host}:{http_port}"
               + (f", syslog udp://{host}:{syslog_udp}" if syslog_udp is not None else "")
               + (f", syslog tcp://{host}:{syslog_tcp}" if syslog_tcp is not None else "")
               + (f" -> {syslog_topic}" if syslog_udp is not None or syslog_tcp is not None else "")
               + (f", StatsD udp://{host}:{statsd_port} -> {statsd_topic}" if statsd_port is not None else "")
               + f"; buffer {max_buffered} records; Ctrl-C stops", err=True)
    left = server.run()
    if left:
        click.echo(f"stopped with {left} records not acknowledged by the log", err=True)
        sys.exit(1)


@click.command()
@click.option("--from", "topic", required=True, help="Topic whose records are posted.")
@click.option("--url", required=True, help="Where to POST them.")
@click.option("--secret", envvar="FRESHET_WEBHOOK_SECRET", default=None,
              help="HMAC key of the X-Freshet-Signature header (env FRESHET_WEBHOOK_SECRET).")
@click.option("--group", default=None, help="Consumer group keeping the position (default freshet-webhook-TOPIC).")
@click.option("--batch", type=int, default=1, show_default=True, help="Records per request.")
@click.option("--max-attempts", type=int, default=5, show_default=True,
              help="Attempts before a record goes to the dead-letter topic.")
@click.option("--backoff-ms", type=int, default=500, show_default=True, help="First retry's pause; it doubles.")
@click.option("--dead-letter-topic", default=None, help="Default TOPIC.dead-letter.")
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Seconds per request.")
@click.option("--idle-exit", type=float, default=None, help="Stop after this many seconds without records.")
@bootstrap_option
@one_line_errors
def webhook(topic, url, secret, group, batch, max_attempts, backoff_ms, dead_letter_topic, timeout, idle_exit,
            bootstrap) -> None:
    """POST each record of a topic to a URL: signed, retried, at least once, dead-lettered after failures."""
    from freshet.ingest.webhook import WebhookSettings, WebhookSink

    if not secret:
        raise ClientError("--secret (or FRESHET_WEBHOOK_SECRET) is needed: receivers check the signature with it")
    sink = WebhookSink(WebhookSettings(
        bootstrap=bootstrap, topic=topic, url=url, secret=secret.encode(), group=group, batch=batch,
        max_attempts=max_attempts, backoff_s=backoff_ms / 1000, dead_letter_topic=dead_letter_topic,
        timeout_s=timeout))
    click.echo(f"posting {topic} to {url} (group {sink.group}, dead letters to {sink.dead_letter_topic});"
               " Ctrl-C stops", err=True)
    stopping_on_signals(sink.stop)
    counts = sink.run(max_idle_s=idle_exit)
    click.echo(f"{counts.delivered} records delivered in {counts.posted} requests, {counts.retries} retries,"
               f" {counts.dead_lettered} dead-lettered", err=True)
