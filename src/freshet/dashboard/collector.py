"""Polls the cluster once a second (as any Kafka client would) and keeps a short history for charts."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections import deque
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec
from prometheus_client.parser import text_string_to_metric_families

from freshet.client import admin_config, consumer_config
from freshet.client.groups import GroupAdmin
from freshet.client.log_dirs import LogDirSizes
from freshet.client.share_groups import read_share_groups

from freshet.client.errors import ClientError

from . import registries
from .cluster import ClusterReader
from .registries import Registry

HISTORY = 300  # samples kept per series
CHARTED_PARTITIONS = 8  # a group's page charts the lag of this many partitions (those lagging most now)
GONE_GROUP_S = 60.0  # a group not described for this long (deleted, expired) loses its per-partition lag history
SPARK_SERIES = {"processed": "processed_rows_per_second", "batch_ms": "batch_duration_ms", "state_rows": "state_rows",
                "late": "late_rows_dropped"}  # chart -> the field of a pipeline's progress (spark/registry.py)
SQL_TOPIC = "__freshet_sql"  # freshet sql's catalog (freshet.sql.catalog, a layer above the dashboard)
CDC_STALE_S = 10.0  # a CDC connector announces itself every 2 s: silent this long, it is shown as stale


@dataclass
class Snapshot:
    at: float = 0.0
    brokers: list = field(default_factory=list)
    topics: dict = field(default_factory=dict)  # name -> {partitions: [...], messages, rate_in}
    groups: dict = field(default_factory=dict)  # id -> {type, state, members, total_lag, partitions: [...]}
    pipelines: dict = field(default_factory=dict)
    applications: dict = field(default_factory=dict)  # event-sourced: aggregates' event counts, projections
    ingest: dict = field(default_factory=dict)  # ingest servers: endpoints, policies, counters
    cdc: dict = field(default_factory=dict)  # CDC connectors (``__freshet_cdc_state``): slot, tables, topics, slot lag
    rules: dict = field(default_factory=dict)  # stored CEP rules and search queries: {"rules": {}, "queries": {}}
    sql: dict = field(default_factory=dict)  # ``__freshet_sql``: {"queries": {id: record}, "sources": {name: ...}}
    undecodable: dict = field(default_factory=dict)  # registry topic -> its records that do not decode (registries.py)
    clients: dict = field(default_factory=dict)  # instance id -> the metrics the client pushed, its traffic
    cluster: dict = field(default_factory=dict)  # brokers, controller, ISRs, reassignments (``cluster.py``)
    topic_names: frozenset = frozenset()  # every topic of the round's metadata (internal ones and errors too)
    error: str | None = None


class Collector:
    def __init__(self, bootstrap: str, interval_s: float = 1.0, lag_threshold: int = 1000,
                 group_thresholds: dict[str, int] | None = None, broker_metrics: list[str] | None = None) -> None:
        self.bootstrap = bootstrap
        self.broker_metrics = list(broker_metrics or [])  # brokers' Prometheus endpoints (segments, sizes)
        self.interval_s = interval_s
        self.lag_threshold = lag_threshold
        self.group_thresholds = group_thresholds or {}
        self.admin = AdminClient(admin_config(bootstrap, {"log_level": 0}))
        self.groups_admin = GroupAdmin(bootstrap)
        self.log_dirs = LogDirSizes(bootstrap)  # partition sizes (DescribeLogDirs)
        self.cluster = ClusterReader(bootstrap)  # the Cluster tab (DescribeCluster, ListPartitionReassignments)
        self.snapshot = Snapshot()
        self._event_counts: dict[str, EventCounter] = {}
        self._registries: dict[str, Registry] = {}
        self.history: dict[str, deque] = {}
        # group -> (topic, partition) -> its lag (a share group's backlog) a round; groups and partitions gone pruned
        self.partition_lag: dict[str, dict[tuple[str, int], deque]] = {}
        self._lag_seen: dict[str, float] = {}  # group -> when its partitions' lag was last recorded
        self._previous: dict[str, tuple[float, int]] = {}
        self._offsets: dict[tuple[str, int, str], int] = {}  # the last round's log start and end offsets
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="dashboard-collector")

    def start(self) -> "Collector":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if not self._thread.is_alive():
            self._close()  # else the collector's thread closes them when its round ends (they may be in use)

    def _close(self) -> None:
        self.log_dirs.close()
        self.cluster.close()
        for registry in self._registries.values():
            registry.close()

    def _rate(self, key: str, now: float, total: int) -> float:
        """Per second since the last round of a total that only grows (0.0 the first time)."""
        previous = self._previous.get(key)
        self._previous[key] = (now, total)
        if previous and now > previous[0]:
            return round(max(total - previous[1], 0) / (now - previous[0]), 1)
        return 0.0

    def _record(self, series: str, at: float, value: float) -> None:
        with self._lock:  # a new series must not change the dict while ``series`` walks it
            self.history.setdefault(series, deque(maxlen=HISTORY)).append((round(at, 3), value))

    def series(self, prefix: str) -> dict[str, list]:
        with self._lock:
            return {k: list(v) for k, v in self.history.items() if k.startswith(prefix)}

    def _record_partition_lag(self, group_id: str, at: float, lags: dict[tuple[str, int], int]) -> None:
        """One round's lag per partition of a group; partitions it no longer has are dropped."""
        with self._lock:
            self._lag_seen[group_id] = at
            kept = self.partition_lag.setdefault(group_id, {})
            for gone in set(kept) - set(lags):
                del kept[gone]
            for where, lag in lags.items():
                kept.setdefault(where, deque(maxlen=HISTORY)).append((round(at, 3), lag))

    def partition_lag_history(self, group_id: str, limit: int = CHARTED_PARTITIONS) -> list[dict]:
        """The lag history of the ``limit`` partitions of a group lagging most in the latest round (then by topic and
        partition), in topic and partition order: ``[{"topic", "partition", "history": [[at, lag], ...]}]``."""
        with self._lock:
            kept = {where: list(samples) for where, samples in self.partition_lag.get(group_id, {}).items()}
        chosen = sorted(kept, key=lambda where: (-(kept[where][-1][1] if kept[where] else 0), where))[:limit]
        return [{"topic": topic, "partition": partition, "history": kept[(topic, partition)]}
                for topic, partition in sorted(chosen)]

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    self.collect()
                except Exception as exc:  # shown on the page; the next round tries again
                    with self._lock:
                        self.snapshot.error = str(exc)
                self._stop.wait(self.interval_s)
        finally:
            self._close()

    def collect(self) -> Snapshot:
        now = time.time()
        md = self.admin.list_topics(timeout=5)
        snap = Snapshot(at=now, brokers=[{"id": b.id, "host": b.host, "port": b.port} for b in md.brokers.values()])
        snap.cluster = self.cluster.read(md)
        snap.topic_names = frozenset(md.topics)  # the registries' topics among them: no metadata request each
        names = sorted(t for t, meta in md.topics.items() if meta.error is None)
        request = {}
        for name in names:
            for p in md.topics[name].partitions:
                request[(name, p, "low")] = TopicPartition(name, p)
        offsets = {}
        if request:
            for spec, kind in ((OffsetSpec.earliest, "low"), (OffsetSpec.latest, "high")):
                futures = self.admin.list_offsets({TopicPartition(t, p): spec() for (t, p, _) in request},
                                                  request_timeout=5)
                for tp, f in futures.items():
                    try:
                        offsets[(tp.topic, tp.partition, kind)] = f.result(5).offset
                    except KafkaException:  # an offline partition (no leader): what it held when last seen, as
                        known = self._offsets.get((tp.topic, tp.partition, kind))  # nothing can change it now
                        if known is not None:
                            offsets[(tp.topic, tp.partition, kind)] = known
            self._offsets = offsets
        log_figures, snap.clients = self._broker_figures(now)
        kept = self._retention_and_cleanup([n for n in names if not n.startswith("__")])
        sizes_on_disk = self.log_dirs.sizes()
        for name in names:
            parts = [{"partition": p, "log_start_offset": offsets.get((name, p, "low"), 0),
                      "high_watermark": offsets.get((name, p, "high"), 0),
                      **log_figures.get((name, p), {"segments": None, "size_bytes": None})}
                     for p in sorted(md.topics[name].partitions)]
            for x in parts:  # sizes from the Kafka API; a broker's /metrics (--broker-metrics) only where it won't say
                x["size_bytes"] = sizes_on_disk.get((name, x["partition"]), x["size_bytes"])
            sizes = [x["size_bytes"] for x in parts]
            total = sum(x["high_watermark"] for x in parts)
            previous = self._previous.get(name)
            rate = 0.0
            if previous and now > previous[0]:
                rate = max(total - previous[1], 0) / (now - previous[0])
            self._previous[name] = (now, total)
            snap.topics[name] = {"partitions": parts, "messages": sum(x["high_watermark"] - x["log_start_offset"]
                                                                       for x in parts),
                                 "end_offsets_sum": total, "rate_in": round(rate, 1), "rate_out": 0.0,
                                 "size_bytes": sum(sizes) if None not in sizes else None,
                                 "internal": name.startswith("__"), **kept.get(name, {})}
            self._record(f"topic:{name}", now, round(rate, 1))
        consumed: dict[str, int] = {}
        for group_id, state, _ in self.groups_admin.list_groups():
            try:
                info = self.groups_admin.describe(group_id)
            except Exception:
                continue
            snap.groups[group_id] = {
                "type": info.protocol,
                "state": info.state, "members": [{"member_id": m, "client_id": c, "host": h} for m, c, h in info.members],
                "total_lag": info.total_lag, "threshold": self.group_thresholds.get(group_id, self.lag_threshold),
                "alert": any(p.lag > self.group_thresholds.get(group_id, self.lag_threshold) for p in info.partitions),
                "partitions": [{"topic": p.topic, "partition": p.partition, "committed": p.committed,
                                "end_offset": p.end_offset, "lag": p.lag, "member": p.member} for p in info.partitions],
            }
            self._record(f"lag:{group_id}", now, info.total_lag)
            self._record_partition_lag(group_id, now, {(p.topic, p.partition): p.lag for p in info.partitions})
            by_topic: dict[str, int] = {}
            for p in info.partitions:
                if p.committed >= 0:
                    consumed[p.topic] = consumed.get(p.topic, 0) + p.committed
                    by_topic[p.topic] = by_topic.get(p.topic, 0) + p.committed
            # records per second the group commits, per topic (the data-flow graph's edge rates)
            snap.groups[group_id]["rates"] = {t: self._rate(f"group:{group_id}:{t}", now, n)
                                              for t, n in by_topic.items()}
        self._collect_share_groups(snap, now)
        for topic, total in consumed.items():  # messages out: what consumer groups committed, per second
            previous = self._previous.get(f"out:{topic}")
            rate = 0.0
            if previous and now > previous[0]:
                rate = max(total - previous[1], 0) / (now - previous[0])
            self._previous[f"out:{topic}"] = (now, total)
            if topic in snap.topics:
                snap.topics[topic]["rate_out"] = round(rate, 1)
        try:
            from freshet.client.pipeline_registry import PIPELINES_TOPIC

            snap.pipelines = self._registry(snap, PIPELINES_TOPIC, registries.pipeline)
        except (KafkaException, ClientError):
            snap.pipelines = {}
        for name, p in snap.pipelines.items():
            progress = p.get("progress") or {}
            self._record(f"pipeline:{name}", now, progress.get("input_rows_per_second") or 0)
            for series, figure in SPARK_SERIES.items():  # Spark's progress per pipeline, charted on its tab
                x = progress.get(figure)
                self._record(f"spark:{series}:{name}", now,
                             x if isinstance(x, (int, float)) and not isinstance(x, bool) else None)
        with self._lock:  # the per-partition lag of groups gone (deleted, expired), not of one missed round
            for gone in [g for g, at in self._lag_seen.items() if now - at > GONE_GROUP_S]:
                del self.partition_lag[gone], self._lag_seen[gone]
        snap.applications = self._applications(snap, now)
        snap.ingest = self._ingest(snap, now)
        snap.cdc = self._cdc(snap, now)
        snap.rules = self._rules(snap)
        snap.sql = self._sql(snap)
        with self._lock:
            self.snapshot = snap
        return snap

    def _registry(self, snap: Snapshot, topic: str, shape) -> dict[str, dict]:
        """A registry topic's entries that decode (by key); those that do not go to ``snap.undecodable``."""
        registry = self._registries.get(topic)
        if registry is None:
            registry = self._registries[topic] = Registry(self.bootstrap, topic, shape)
        entries, marks = registry.refresh(timeout_s=5.0, topics=snap.topic_names)
        if marks:
            snap.undecodable[topic] = marks
        return entries

    def _collect_share_groups(self, snap: Snapshot, now: float) -> None:
        """Share groups (queues): their state topic read as a Kafka client; the backlog stands in for lag."""
        try:
            shared = read_share_groups(self.bootstrap, timeout_s=5)
        except Exception:
            return
        for group_id, info in shared.items():
            threshold = self.group_thresholds.get(group_id, self.lag_threshold)
            snap.groups[group_id] = {
                "type": "share", "state": info.state, "configs": info.configs,  # the group's own (else the broker's)
                "members": [{"member_id": m["member_id"], "client_id": m["client_id"], "host": m["client_host"],
                             "epoch": m.get("member_epoch"), "subscribed": m.get("subscribed", [])}
                            for m in info.members],
                "total_lag": info.backlog, "threshold": threshold, "alert": info.backlog > threshold,
                "partitions": [{"topic": p.topic, "partition": p.partition, "start_offset": p.start_offset,
                                "end_offset": p.high_watermark, "acquired": p.acquired, "available": p.available,
                                "acknowledged": p.acknowledged, "archived": p.archived_total, "backlog": p.backlog,
                                # records in flight or to redeliver by delivery count ({"2": 4}: four delivered twice)
                                "deliveries": {str(k): v for k, v in p.deliveries.items()},
                                "redelivered": sum(v for k, v in p.deliveries.items() if k > 1)}
                               for p in info.partitions],
            }
            self._record(f"lag:{group_id}", now, info.backlog)
            self._record_partition_lag(group_id, now, {(p.topic, p.partition): p.backlog for p in info.partitions})

    def _applications(self, snap: Snapshot, now: float) -> dict:
        """Each event-sourced application in ``__freshet_applications``: events per aggregate type (counted
        by reading the events topic's new records each round) and each projection's position and lag."""
        from freshet.client.application_registry import REGISTRY_TOPIC

        topics = snap.topics
        applications, projections = {}, {}
        for key, value in self._registry(snap, REGISTRY_TOPIC, registries.application).items():
            kind, _, rest = key.partition("/")
            if kind == "application":
                applications[rest] = value
            elif kind == "projection":
                app, _, name = rest.partition("/")
                projections[(app, name)] = value
        out = {}
        for name, app in sorted(applications.items()):
            events_topic = app["events_topic"]
            if events_topic not in topics:
                continue
            counter = self._event_counts.get(name)
            if counter is None or counter.topic != events_topic or counter.partitions != app["partitions"]:
                if counter is not None:
                    counter.close()
                counter = self._event_counts[name] = EventCounter(self.bootstrap, events_topic, app["partitions"])
            counter.advance()
            ends = {p["partition"]: p["high_watermark"] for p in topics[events_topic]["partitions"]}
            views = {}
            for (app_name, projection), record in sorted(projections.items()):
                if app_name != name:
                    continue
                positions = {int(p): o for p, o in record["positions"].items()}
                lag = sum(max(end - positions.get(p, 0), 0) for p, end in ends.items())
                views[projection] = {**record, "lag": lag}
                self._record(f"projection:{name}/{projection}", now, lag)
            out[name] = {**app, "aggregates": {t: counter.counts.get(t, {"events": 0, "streams": 0})
                                               for t in app["aggregates"]},
                         "events": counter.counted, "projections": views}
        for gone in set(self._event_counts) - set(out):
            self._event_counts.pop(gone).close()
        return out

    def _rules(self, snap: Snapshot) -> dict:
        """The CEP rules (``__freshet_rules``) and stored search queries (``__freshet_watches``) that running
        ``cep`` and ``watch`` pipelines match, each read by a consumer kept between rounds."""
        from freshet.client.stored import RULES_TOPIC, WATCHES_TOPIC

        return {kind: dict(sorted(self._registry(snap, topic, registries.definition).items()))
                for kind, topic in (("rules", RULES_TOPIC), ("queries", WATCHES_TOPIC))}

    def _sql(self, snap: Snapshot) -> dict:
        """The SQL catalog (``__freshet_sql``, written by ``freshet sql``): its persistent queries (CSAS/CTAS: the
        statement, the sink and its topic, the status) and its streams and tables (by lower-cased name: kind, name,
        topic), read by a consumer kept between rounds."""
        entries = self._registry(snap, SQL_TOPIC, registries.anything)
        queries = {k.partition(":")[2]: v["query"] for k, v in entries.items()
                   if k.startswith("query:") and isinstance(v.get("query"), dict)}
        sources = {}
        for key, value in entries.items():
            kind, _, name = key.partition(":")
            definition = value.get("definition") or {}
            if kind in ("stream", "table") and definition.get("topic"):
                sources[name] = {"kind": kind, "name": definition.get("name", name), "topic": definition["topic"]}
        return {"queries": dict(sorted(queries.items())), "sources": sources}

    def _cdc(self, snap: Snapshot, now: float) -> dict:
        """CDC connectors as they last announced themselves (every 2 s) in ``__freshet_cdc_state``: database, slot,
        publication, tables, topics written, the slot's lag in bytes (charted) and the last change's time; one whose
        announcement is older than ``CDC_STALE_S`` is marked ``stale`` (killed, or cut off from the broker)."""
        from freshet.client.cdc_registry import CDC_TOPIC

        connectors = {key.removeprefix("cdc/"): value for key, value in
                      self._registry(snap, CDC_TOPIC, registries.cdc_connector).items() if key.startswith("cdc/")}
        for name, c in connectors.items():
            c["stale"] = now - (c.get("updated_ms") or 0) / 1000 > CDC_STALE_S and c.get("status") != "failed"
            # charted on the CDC tab; a stale connector's last figure is no reading of now: a gap in its line
            self._record(f"cdc:{name}", now, None if c["stale"] else c.get("slot_lag_bytes"))
        return dict(sorted(connectors.items()))

    def _ingest(self, snap: Snapshot, now: float) -> dict:
        """Ingest servers as they last announced themselves (every 2 s) in ``__freshet_ingest``, read by one
        consumer kept between rounds; each endpoint's records per second from the counters' growth."""
        from freshet.client.ingest_registry import INGEST_TOPIC

        servers = {key.removeprefix("ingest/"): value for key, value in
                   self._registry(snap, INGEST_TOPIC, registries.ingest_server).items()}
        for name, server in servers.items():
            for endpoint, e in server.get("endpoints", {}).items():
                key = f"ingest:{name}/{endpoint}"
                previous = self._previous.get(key)
                at = server.get("updated_ms", 0) / 1000
                rate = 0.0
                if previous and at > previous[0]:
                    rate = max(e["received"] - previous[1], 0) / (at - previous[0])
                if not previous or at > previous[0]:
                    self._previous[key] = (at, e["received"])
                    self._record(key, now, round(rate, 1))
                e["rate"] = round(rate, 1) if previous else 0.0
        return servers

    def _broker_figures(self, now: float) -> tuple[dict[tuple[str, int], dict], dict[str, dict]]:
        """From each broker's /metrics: segment count and bytes per partition (no Kafka API reports them), and
        the clients: the metrics each pushed (KIP-714 telemetry) with the bytes per second it produced and
        fetched (the broker's counters per client id)."""
        figures: dict[tuple[str, int], dict] = {}
        names = {"kafka_log_log_numlogsegments": "segments", "kafka_log_log_size": "size_bytes"}
        clients: dict[str, dict] = {}
        traffic: dict[tuple[str, str], float] = {}
        for url in self.broker_metrics:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    text = response.read().decode()
            except OSError:
                continue  # that broker's figures show as unknown this round
            for family in text_string_to_metric_families(text):
                key = names.get(family.name)
                if key:
                    for sample in family.samples:
                        where = (sample.labels["topic"], int(sample.labels["partition"]))
                        figures.setdefault(where, {"segments": None, "size_bytes": None})[key] = int(sample.value)
                elif family.name.startswith("org_apache_kafka_"):
                    for sample in family.samples:
                        labels = sample.labels
                        client = clients.setdefault(labels["client_instance_id"], {
                            "client_id": labels["client_id"], "software": labels["client_software"],
                            "host": labels["client_host"], "metrics": {}})
                        short = family.name[len("org_apache_kafka_"):]
                        client["kind"] = short.split("_", 1)[0]  # producer or consumer
                        # per-node metrics: the worst node
                        client["metrics"][short] = max(client["metrics"].get(short, sample.value), sample.value)
                elif family.name == "freshet_client_bytes":
                    for sample in family.samples:
                        where = (sample.labels["request"], sample.labels["client_id"])
                        traffic[where] = traffic.get(where, 0.0) + sample.value
        rates = {}
        for (request, client_id), total in traffic.items():
            key = f"client:{request}:{client_id}"
            previous = self._previous.get(key)
            if previous and now > previous[0]:
                rates[(request, client_id)] = round(max(total - previous[1], 0) / (now - previous[0]), 1)
            self._previous[key] = (now, total)
        for client in clients.values():
            client["produce_bytes_per_s"] = rates.get(("produce", client["client_id"]), 0.0)
            client["fetch_bytes_per_s"] = rates.get(("fetch", client["client_id"]), 0.0)
        return figures, clients

    def _retention_and_cleanup(self, names: list[str]) -> dict[str, dict]:
        """Per topic its retention.ms, retention.bytes and cleanup.policy (one DescribeConfigs for them all); a
        topic the dashboard may not describe is left out (the page shows "—")."""
        if not names:
            return {}
        keys = {"retention.ms": "retention_ms", "retention.bytes": "retention_bytes",
                "cleanup.policy": "cleanup_policy"}
        out = {}
        resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names]
        for resource, future in self.admin.describe_configs(resources).items():
            try:
                configs = future.result(5)
            except KafkaException:
                continue
            out[resource.name] = {field: configs[k].value for k, field in keys.items() if k in configs}
        return out

    def topic_configs(self, topic: str, admin: AdminClient | None = None) -> dict:
        """The topic's configs as ``admin`` (default: the dashboard's own) may read them; KafkaException if not."""
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        configs = (admin if admin is not None else self.admin).describe_configs([resource])[resource].result(10)
        return {k: {"value": v.value, "default": v.is_default} for k, v in sorted(configs.items())}


class EventCounter:
    """Counts an events topic's records per aggregate type (the key's ``Type/`` prefix) and the distinct
    streams, reading only what arrived since the last round (read_committed: aborted events never count)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, budget_s: float = 2.0) -> None:
        self.topic, self.partitions, self.budget_s = topic, partitions, budget_s
        self.consumer = Consumer(consumer_config(bootstrap, overrides={
            "isolation.level": "read_committed", "log_level": 0, "fetch.wait.max.ms": 10,
            "enable.partition.eof": True}))
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.counts: dict[str, dict] = {}
        self._streams: dict[str, set] = {}
        self.counted = 0
        self._at_end: set[int] = set()

    def advance(self) -> None:
        """Count what arrived, until every partition reports its end (or the round's time budget is spent)."""
        deadline = time.monotonic() + self.budget_s
        first = True
        while first or (len(self._at_end) < self.partitions and time.monotonic() < deadline):
            first = False
            for m in self.consumer.consume(10_000, 0.05):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        self._at_end.add(m.partition())
                    continue
                self._at_end.discard(m.partition())
                if m.key() is None:
                    continue
                type_name = m.key().split(b"/", 1)[0].decode(errors="replace")
                entry = self.counts.get(type_name)
                if entry is None:
                    entry = self.counts[type_name] = {"events": 0, "streams": 0}
                    self._streams[type_name] = set()
                entry["events"] += 1
                streams = self._streams[type_name]
                if m.key() not in streams:
                    streams.add(m.key())
                    entry["streams"] = len(streams)
                self.counted += 1

    def close(self) -> None:
        self.consumer.close()
