"""``freshet broker start``."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import sys

import click

from freshet.broker.config import BrokerConfig, ConsumerGroupSettings, ShareSettings
from freshet.broker.groups.consumer import ASSIGNORS
from freshet.broker.security.listeners import ListenerError, SecurityConfig, parse_listener
from freshet.broker.security.sasl import SUPPORTED

DEFAULTS = BrokerConfig(data_dir="./data")  # every default below is BrokerConfig's

@click.group()
def broker() -> None:
    """Run the Freshet broker."""


@broker.command("start")
@click.option("--data-dir", default=DEFAULTS.data_dir, show_default=True, help="Where the log lives.")
@click.option("--port", default=DEFAULTS.port, show_default=True, type=int, help="0 picks a free port.")
@click.option("--host", default=DEFAULTS.host, show_default=True, help="Address to listen on.")
@click.option("--advertised-host", default=DEFAULTS.advertised_host, help="Host clients are told to connect to.")
@click.option("--auto-create-topics/--no-auto-create-topics", default=DEFAULTS.auto_create_topics, show_default=True)
@click.option("--default-partitions", default=DEFAULTS.default_partitions, show_default=True, type=int)
@click.option("--cleaner-interval-ms", default=DEFAULTS.cleaner_interval_ms, show_default=True, type=int,
              help="How often retention and compaction run.")
@click.option("--initial-rebalance-delay-ms", default=DEFAULTS.initial_rebalance_delay_ms, show_default=True, type=int,
              help="How long a new consumer group waits for more members before its first assignment.")
@click.option("--idle-timeout-ms", default=int(DEFAULTS.idle_timeout_s * 1000), show_default=True, type=int,
              help="Close connections silent this long (connections.max.idle.ms).")
@click.option("--frame-timeout-ms", default=int(DEFAULTS.frame_timeout_s * 1000), show_default=True, type=int,
              help="Close a connection whose started request does not arrive whole within this (slow clients).")
@click.option("--max-request-bytes", default=DEFAULTS.max_request_bytes, show_default=True, type=int,
              help="Largest request accepted (socket.request.max.bytes); larger frames close the connection.")
@click.option("--producer-byte-rate", default=DEFAULTS.producer_byte_rate, show_default=True, type=int,
              help="Produce quota per client id in bytes/s (0: none); excess is throttled (throttle_time_ms).")
@click.option("--metrics-port", default=DEFAULTS.metrics_port, type=int,
              help="Serve Prometheus metrics (segment count, size, offsets per partition) on GET /metrics here.")
@click.option("--consumer-session-timeout-ms", default=DEFAULTS.consumer_groups.session_timeout_ms, show_default=True,
              type=int, help="Consumer groups (group.protocol=consumer): a member silent this long is removed.")
@click.option("--consumer-heartbeat-interval-ms", default=DEFAULTS.consumer_groups.heartbeat_interval_ms,
              show_default=True, type=int, help="Consumer groups (group.protocol=consumer): how often members heartbeat.")
@click.option("--consumer-assignor", default=DEFAULTS.consumer_groups.default_assignor, show_default=True,
              type=click.Choice(list(ASSIGNORS)), help="Consumer groups: the server-side assignor members do not choose.")
@click.option("--telemetry-push-interval-ms", default=DEFAULTS.telemetry_push_interval_ms, show_default=True, type=int,
              help="Ask clients to push their own metrics this often (KIP-714 telemetry, shown on /metrics and the "
                   "dashboard's Clients tab); 0: off, as Kafka without a metrics plugin.")
@click.option("--share-record-lock-duration-ms", default=DEFAULTS.share.record_lock_duration_ms, show_default=True,
              type=int, help="Share groups: how long a delivered record stays locked to its consumer.")
@click.option("--share-delivery-count-limit", default=DEFAULTS.share.delivery_count_limit, show_default=True, type=int,
              help="Share groups: deliveries after which a record is archived instead of redelivered.")
@click.option("--share-session-timeout-ms", default=DEFAULTS.share.session_timeout_ms, show_default=True, type=int,
              help="Share groups: a member silent this long leaves and its records come back.")
@click.option("--share-auto-offset-reset", default=DEFAULTS.share.auto_offset_reset, show_default=True,
              type=click.Choice(["earliest", "latest"]), help="Where a new share group starts in each partition.")
@click.option("--listener", "listeners", multiple=True,
              help="PLAINTEXT://127.0.0.1:9092, SSL://..., SASL_PLAINTEXT://..., SASL_SSL://0.0.0.0:9093 (repeat for "
                   "several; default: PLAINTEXT on --host/--port).")
@click.option("--ssl-certfile", default=None, help="The broker's certificate chain (PEM), for SSL / SASL_SSL.")
@click.option("--ssl-keyfile", default=None, help="The broker's private key (PEM).")
@click.option("--ssl-cafile", default=None, help="CAs trusted for client certificates (mutual TLS).")
@click.option("--ssl-client-auth", default="none", show_default=True, type=click.Choice(["none", "requested", "required"]))
@click.option("--sasl-mechanisms", default="SCRAM-SHA-256,SCRAM-SHA-512,PLAIN", show_default=True)
@click.option("--authorizer/--no-authorizer", default=None,
              help="Authorize every request against ACLs (Kafka's authorizer.class.name); plaintext clients are "
                   "User:ANONYMOUS. Default: on when a listener authenticates its clients (SASL, or TLS with "
                   "--ssl-client-auth required); without it the ACL APIs answer SECURITY_DISABLED.")
@click.option("--super-user", "super_users", multiple=True, help="A principal allowed everything (User:admin).")
@click.option("--allow-everyone-if-no-acl-found/--no-allow-everyone-if-no-acl-found", default=False,
              show_default=True, help="With an authorizer: a resource no ACL names is open to every principal.")
@click.option("--reauth-ms", default=0, show_default=True, type=int,
              help="connections.max.reauth.ms: SASL sessions expire after this and clients re-authenticate.")
@click.option("--max-failed-authentications", default=30, show_default=True, type=int,
              help="Failed logins per client address within a minute before its attempts are refused.")
@click.option("--inter-broker-sasl-mechanism", default=None, type=click.Choice(list(SUPPORTED)),
              help="Cluster mode on a SASL listener: the mechanism brokers log in to each other with "
                   "(sasl.mechanism.inter.broker.protocol); give --super-user User:<inter-broker user> too.")
@click.option("--inter-broker-user", default=None,
              help="The user of the broker's inter-broker login (its JAAS username); created in the cluster's "
                   "SCRAM users by the first broker if it has none.")
@click.option("--inter-broker-password-file", default=None, type=click.Path(dir_okay=False),
              help="A file holding that user's password (its first line).")
@click.option("--node-id", default=DEFAULTS.node_id, show_default=True, type=int,
              help="This broker's id (node.id); unique in a cluster.")
@click.option("--controller", "controllers", default=None, metavar="HOST:PORT,...",
              help="Join a cluster: the controllers' endpoints (python -m freshet.controller --listen ...), as "
                   "Kafka's controller.quorum.bootstrap.servers. Without it: the one-node broker.")
@click.option("--controller-password-file", default=None, type=click.Path(dir_okay=False),
              envvar="FRESHET_CONTROLLER_PASSWORD_FILE", show_envvar=True,
              help="The cluster secret (the file's first line) proved to controllers started with --endpoint-auth.")
@click.option("--rack", default=None, help="broker.rack (cluster mode).")
@click.option("--replica-selector-class", default=None,
              type=click.Choice(["org.apache.kafka.common.replica.LeaderSelector",
                                 "org.apache.kafka.common.replica.RackAwareReplicaSelector"]),
              help="replica.selector.class (cluster mode, KIP-392): RackAwareReplicaSelector lets consumers with "
                   "client.rack read from a follower in their rack. Default: leaders only.")
@click.option("--heartbeat-interval-ms", default=DEFAULTS.heartbeat_interval_ms, show_default=True, type=int,
              help="broker.heartbeat.interval.ms (cluster mode); the session timeout is the controllers'.")
@click.option("--default-replication-factor", default=DEFAULTS.default_replication_factor, show_default=True,
              type=int, help="default.replication.factor: for topics created without one (cluster mode).")
@click.option("--offsets-topic-replication-factor", default=DEFAULTS.offsets_topic_replication_factor,
              show_default=True, type=int,
              help="offsets.topic.replication.factor (cluster mode): the replicas of __consumer_offsets and "
                   "__transaction_state, created once this many brokers are live (their coordinators are not "
                   "available before); set it below 3 for a cluster of fewer brokers.")
@click.option("--share-state-topic-replication-factor", default=DEFAULTS.share_state_topic_replication_factor,
              show_default=True, type=int,
              help="share.coordinator.state.topic.replication.factor (cluster mode): the replicas of "
                   "__share_group_state (share groups' delivery state), created once this many brokers are live.")
@click.option("--replica-lag-time-max-ms", default=DEFAULTS.replica_lag_time_max_ms, show_default=True, type=int,
              help="replica.lag.time.max.ms: a follower behind this long leaves the ISR (cluster mode).")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def start(data_dir: str, port: int, host: str, advertised_host: str | None, auto_create_topics: bool,
          default_partitions: int, cleaner_interval_ms: int, initial_rebalance_delay_ms: int, idle_timeout_ms: int,
          frame_timeout_ms: int, max_request_bytes: int, producer_byte_rate: int, metrics_port: int | None,
          consumer_session_timeout_ms: int, consumer_heartbeat_interval_ms: int, consumer_assignor: str,
          telemetry_push_interval_ms: int,
          share_record_lock_duration_ms: int, share_delivery_count_limit: int, share_session_timeout_ms: int,
          share_auto_offset_reset: str, listeners: tuple[str, ...], ssl_certfile: str | None,
          ssl_keyfile: str | None, ssl_cafile: str | None, ssl_client_auth: str, sasl_mechanisms: str,
          authorizer: bool | None, super_users: tuple[str, ...], allow_everyone_if_no_acl_found: bool, reauth_ms: int,
          max_failed_authentications: int, node_id: int, controllers: str | None,
          controller_password_file: str | None, rack: str | None,
          replica_selector_class: str | None, inter_broker_sasl_mechanism: str | None,
          inter_broker_user: str | None, inter_broker_password_file: str | None,
          heartbeat_interval_ms: int, default_replication_factor: int, offsets_topic_replication_factor: int,
          share_state_topic_replication_factor: int, replica_lag_time_max_ms: int,
          log_level: str) -> None:
    """Start a broker in the foreground (Ctrl-C stops it cleanly)."""
    from freshet.broker import run_broker

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        parsed = [parse_listener(spec) for spec in listeners]
    except ListenerError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    for problem in (
            consumer_session_timeout_ms < 100 and "--consumer-session-timeout-ms must be at least 100",
            not 0 < consumer_heartbeat_interval_ms < consumer_session_timeout_ms
            and "--consumer-heartbeat-interval-ms must be positive and below --consumer-session-timeout-ms",
            telemetry_push_interval_ms < 0 and "--telemetry-push-interval-ms must not be negative (0: off)",
            node_id < 0 and "--node-id must not be negative",
            heartbeat_interval_ms < 10 and "--heartbeat-interval-ms must be at least 10",
            default_replication_factor < 1 and "--default-replication-factor must be at least 1",
            offsets_topic_replication_factor < 1 and "--offsets-topic-replication-factor must be at least 1",
            share_state_topic_replication_factor < 1
            and "--share-state-topic-replication-factor must be at least 1",
            replica_lag_time_max_ms < 1 and "--replica-lag-time-max-ms must be positive"):
        if problem:
            click.echo(f"error: {problem}", err=True)
            sys.exit(1)
    controller_addresses: list[tuple[str, int]] = []
    cluster_errors: tuple[type[Exception], ...] = ()  # cluster mode: a refused membership is one line, exit 1
    if controllers is not None:
        from freshet.broker.cluster import ClusterError, parse_controllers

        cluster_errors = (ClusterError,)
        try:
            controller_addresses = parse_controllers(controllers)
        except ValueError as exc:
            click.echo(f"error: --controller: {exc}", err=True)
            sys.exit(1)
        if controller_password_file:
            from freshet.controller.auth import PASSWORD_FILE_ENV, read_password_file

            try:
                read_password_file(controller_password_file)
            except ValueError as exc:
                click.echo(f"error: --controller-password-file: {exc}", err=True)
                sys.exit(1)
            os.environ[PASSWORD_FILE_ENV] = controller_password_file  # what the broker's controller clients read
    mechanisms = tuple(m.strip().upper() for m in sasl_mechanisms.split(",") if m.strip())
    unknown = sorted(set(mechanisms) - set(SUPPORTED))
    if unknown or not mechanisms:
        click.echo(f"error: --sasl-mechanisms takes {', '.join(SUPPORTED)}, not {', '.join(unknown) or 'nothing'}",
                   err=True)
        sys.exit(1)
    inter_broker_password = None
    if bool(inter_broker_sasl_mechanism) + bool(inter_broker_user) + bool(inter_broker_password_file) not in (0, 3):
        click.echo("error: --inter-broker-sasl-mechanism, --inter-broker-user and --inter-broker-password-file go "
                   "together", err=True)
        sys.exit(1)
    if inter_broker_password_file:
        try:
            with open(inter_broker_password_file) as f:
                inter_broker_password = f.readline().rstrip("\n")
        except OSError as exc:
            click.echo(f"error: --inter-broker-password-file: {exc.strerror}: {inter_broker_password_file}", err=True)
            sys.exit(1)
    security = SecurityConfig(ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile, ssl_cafile=ssl_cafile,
                              ssl_client_auth=ssl_client_auth, sasl_mechanisms=mechanisms,
                              authorizer=authorizer, super_users=tuple(super_users),
                              allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found, reauth_ms=reauth_ms,
                              max_failed_authentications=max_failed_authentications,
                              inter_broker_sasl_mechanism=inter_broker_sasl_mechanism,
                              inter_broker_user=inter_broker_user, inter_broker_password=inter_broker_password)
    if any(l.tls for l in parsed):
        try:
            security.server_context()
        except (ListenerError, OSError, ssl.SSLError) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
    config = BrokerConfig(
        data_dir=data_dir, host=host, port=port, advertised_host=advertised_host,
        auto_create_topics=auto_create_topics, default_partitions=default_partitions,
        cleaner_interval_ms=cleaner_interval_ms, initial_rebalance_delay_ms=initial_rebalance_delay_ms,
        idle_timeout_s=idle_timeout_ms / 1000, frame_timeout_s=frame_timeout_ms / 1000,
        max_request_bytes=max_request_bytes, producer_byte_rate=producer_byte_rate,
        metrics_port=metrics_port,
        consumer_groups=ConsumerGroupSettings(session_timeout_ms=consumer_session_timeout_ms,
                                              heartbeat_interval_ms=consumer_heartbeat_interval_ms,
                                              default_assignor=consumer_assignor),
        telemetry_push_interval_ms=telemetry_push_interval_ms,
        share=ShareSettings(record_lock_duration_ms=share_record_lock_duration_ms,
                            delivery_count_limit=share_delivery_count_limit,
                            session_timeout_ms=share_session_timeout_ms, auto_offset_reset=share_auto_offset_reset),
        listeners=parsed, security=security, node_id=node_id, controllers=controller_addresses, rack=rack,
        replica_selector_class=replica_selector_class,
        heartbeat_interval_ms=heartbeat_interval_ms, default_replication_factor=default_replication_factor,
        offsets_topic_replication_factor=offsets_topic_replication_factor,
        share_state_topic_replication_factor=share_state_topic_replication_factor,
        replica_lag_time_max_ms=replica_lag_time_max_ms,
    )

    def ready(b) -> None:
        # one line on stdout that scripts and tests wait for
        print(f"freshet broker listening on {b.advertised_host}:{b.port}", flush=True)
        for listener in b.listeners[1:]:
            host, port = b.advertised(listener)
            print(f"freshet broker listener {listener.protocol} on {host}:{port}", flush=True)
        if b.metrics:
            print(f"freshet broker metrics on http://{b.config.host}:{b.metrics.port}/metrics", flush=True)

    if taken := _address_in_use(config.effective_listeners()):
        click.echo(f"error: cannot start the broker: {taken}", err=True)  # before the data directory is opened
        sys.exit(1)
    try:
        asyncio.run(run_broker(config, ready))
    except OSError as exc:
        click.echo(f"error: cannot start the broker: {exc.strerror or exc}", err=True)
        sys.exit(1)
    except cluster_errors as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


def _address_in_use(listeners) -> str | None:
    """A listener's address another process holds, tried as the broker binds it (SO_REUSEADDR, every address its
    host resolves to), before the broker opens its data directory and logs its internal topics: a port in use is
    one line then, and nothing is created. (A port taken between this check and the bind still fails the start.)"""
    import socket

    for listener in listeners:
        if not listener.port:
            continue
        try:
            for family, kind, proto, _, address in socket.getaddrinfo(listener.host or None, listener.port,
                                                                      type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE):
                with socket.socket(family, kind, proto) as probe:
                    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    if family == socket.AF_INET6:
                        probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    probe.bind(address)
        except OSError as exc:
            return f"{listener.host}:{listener.port}: {exc.strerror or exc}"
    return None
