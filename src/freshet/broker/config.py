"""The broker's settings, with their defaults stated once (``freshet broker start`` shows these)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .security.listeners import Listener, SecurityConfig


@dataclass(frozen=True)
class ConsumerGroupSettings:
    """Kafka's ``group.consumer.*`` broker configs."""

    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 1_000  # group.consumer.max.size
    # the bounds of a group's own consumer.session.timeout.ms / consumer.heartbeat.interval.ms (Kafka's defaults;
    # widened to take in the broker's own values when those are set outside them)
    min_session_timeout_ms: int = 45_000  # group.consumer.min.session.timeout.ms
    max_session_timeout_ms: int = 60_000  # group.consumer.max.session.timeout.ms
    min_heartbeat_interval_ms: int = 5_000  # group.consumer.min.heartbeat.interval.ms
    max_heartbeat_interval_ms: int = 15_000  # group.consumer.max.heartbeat.interval.ms
    default_assignor: str = "uniform"  # the first of group.consumer.assignors


@dataclass(frozen=True)
class ShareSettings:
    """Broker-level defaults (Kafka's ``group.share.*``); a group's own configs override the first five."""

    record_lock_duration_ms: int = 30_000  # group.share.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    auto_offset_reset: str = "latest"  # share.auto.offset.reset
    isolation_level: str = "read_uncommitted"  # share.isolation.level
    max_record_locks: int = 2_000  # group.share.partition.max.record.locks
    max_size: int = 200  # group.share.max.size


@dataclass
class BrokerConfig:
    data_dir: str
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    node_id: int = 0
    cluster_id: str = "freshet"
    auto_create_topics: bool = False
    default_partitions: int = 1
    max_request_bytes: int = 100 * 1024 * 1024  # socket.request.max.bytes
    idle_timeout_s: float = 600.0  # connections.max.idle.ms
    frame_timeout_s: float = 30.0  # a started frame must arrive whole within this
    max_in_flight: int = 100  # queued responses per connection before reading pauses
    initial_rebalance_delay_ms: int = 100  # group.initial.rebalance.delay.ms (Kafka: 3000)
    cleaner_interval_ms: int = 30_000  # how often retention and compaction run
    producer_byte_rate: int = 0  # produce quota per client id, bytes/s (0: unlimited)
    metrics_port: int | None = None  # Prometheus GET /metrics on this port (0: a free one); None: off
    consumer_groups: ConsumerGroupSettings = field(default_factory=ConsumerGroupSettings)  # group.consumer.*
    telemetry_push_interval_ms: int = 0  # how often clients push their metrics (KIP-714); 0: not asked to
    share: ShareSettings = field(default_factory=ShareSettings)  # group.share.* defaults for share groups
    listeners: list[Listener] = field(default_factory=list)  # none given: one PLAINTEXT listener on host:port
    security: SecurityConfig = field(default_factory=SecurityConfig)
    # cluster mode (issue #46): the controllers' JSON endpoints; none: the one-node broker, as always
    controllers: list[tuple[str, int]] = field(default_factory=list)
    rack: str | None = None  # broker.rack
    replica_selector_class: str | None = None  # replica.selector.class (KIP-392; None: Kafka's LeaderSelector)
    heartbeat_interval_ms: int = 2_000  # broker.heartbeat.interval.ms (the session timeout is the controllers')
    default_replication_factor: int = 1  # default.replication.factor (CreateTopics without one)
    # offsets.topic.replication.factor / transaction.state.log.replication.factor (cluster mode): the internal
    # topics are created with it once that many brokers are live, never smaller
    offsets_topic_replication_factor: int = 3
    # share.coordinator.state.topic.replication.factor (cluster mode): __share_group_state's, the same way
    share_state_topic_replication_factor: int = 3
    replica_lag_time_max_ms: int = 10_000  # replica.lag.time.max.ms

    def effective_listeners(self) -> list[Listener]:
        return self.listeners or [Listener("PLAINTEXT", self.host, self.port)]
