"""The Cluster tab's figures, read as any Kafka client reads them (nothing reaches into a broker):

- brokers: DescribeCluster (v2, KIP-1073, with the fenced ones and ``is_fenced``; a cluster that answers only
  v0/v1 names its unfenced brokers, and a broker id that holds replicas but is not named is shown as gone), each
  with its host:port, rack, and the active controller marked;
- partitions: Metadata (the dashboard's ``list_topics``): per broker the partitions it leads and holds; each
  partition's leader, replicas and ISR; under-replicated (ISR smaller than the replicas, those being added by a
  reassignment left out, as Kafka counts them) and offline (no leader);
- reassignments in progress: ListPartitionReassignments (API 46): each partition's replicas, those being added and
  removed, and its progress: how many of the replicas being added are in the ISR, and for each one not yet in it,
  its offset lag and its bytes on disk against the partition's largest replica (DescribeLogDirs on its broker,
  ``client/reassignment.py``). A cluster that does not answer API 46 shows the reason instead of a list.

librdkafka has no call for DescribeCluster v2, ListPartitionReassignments or DescribeLogDirs, so kafka-python's
admin client sends them, with the same security settings as every other client of ours (as
``client/log_dirs.py`` does)."""

from __future__ import annotations

from freshet.client.config import resolve_bootstrap
from freshet.client.errors import ClientError
from freshet.client.kafka_python import admin_client
from freshet.client.reassignment import Moving, ReassignmentAdmin


class ClusterReader:
    """``read(metadata)``: the Cluster tab's answer from a confluent-kafka ``ClusterMetadata`` and the requests
    above; the kafka-python connections kept between calls (made again after a failure)."""

    def __init__(self, bootstrap: str | None = None, timeout_ms: int = 5000) -> None:
        self.bootstrap = resolve_bootstrap(bootstrap)
        self.timeout_ms = timeout_ms
        self._admin = None
        self.moves = ReassignmentAdmin(self.bootstrap, timeout_ms)

    def close(self) -> None:
        self.moves.close()
        if self._admin is not None:
            admin, self._admin = self._admin, None
            admin.close()

    def _described(self) -> tuple[dict | None, str | None]:
        """DescribeCluster (v2 where the cluster speaks it); (answer, None) or (None, why not)."""
        from kafka.errors import KafkaError

        try:
            if self._admin is None:
                self._admin = admin_client(self.bootstrap, self.timeout_ms)
            return self._admin.describe_cluster(), None
        except (KafkaError, OSError) as exc:
            self.close()
            return None, f"{type(exc).__name__}: {exc}"

    def read(self, metadata) -> dict:
        from kafka.errors import KafkaError

        described, described_error = self._described()
        try:
            moving, moving_error = self.moves.ongoing(), None
            if moving:
                moving = self.moves.progress(moving)
        except (ClientError, KafkaError, OSError) as exc:  # a cluster without API 46 (IncompatibleBrokerVersion),
            moving, moving_error = None, str(exc)  # a refusal, no broker reached
            self.moves.close()
        answer = figures(metadata, described, moving)
        answer["errors"] = {k: v for k, v in (("describe_cluster", described_error),
                                              ("reassignments", moving_error)) if v}
        return answer


def figures(metadata, described: dict | None, moving: list[Moving] | None) -> dict:
    """The tab's answer from Metadata (``metadata``: confluent-kafka's ``ClusterMetadata``), DescribeCluster
    (kafka-python's dict, or None) and the reassignments in progress (with their replicas' progress; None: not
    known)."""
    controller = metadata.controller_id
    brokers: dict[int, dict] = {}
    if described is not None:
        controller = described.get("controller_id", controller)
        for b in described.get("brokers", []):
            brokers[b["broker_id"]] = {"id": b["broker_id"], "host": b["host"], "port": b["port"],
                                       "rack": b.get("rack"), "fenced": bool(b.get("is_fenced", False))}
    for b in metadata.brokers.values():  # Metadata names the unfenced ones (and their racks, librdkafka permitting)
        brokers.setdefault(b.id, {"id": b.id, "host": b.host, "port": b.port, "rack": None, "fenced": False})
    # a partition being moved counts its replicas as before the move (Kafka's replicas less those being added)
    adding = {(m.topic, m.partition): len(m.adding) for m in moving or ()}
    topics = []
    for name in sorted(metadata.topics):
        meta = metadata.topics[name]
        if meta.error is not None:
            continue
        parts = []
        for index in sorted(meta.partitions):
            p = meta.partitions[index]
            replicas, isr = list(p.replicas), list(p.isrs)
            parts.append({"partition": index, "leader": p.leader, "replicas": replicas, "isr": isr,
                          "under_replicated": len(isr) < len(replicas) - adding.get((name, index), 0),
                          "offline": p.leader < 0})
            for r in replicas:  # a replica on a broker nobody names: gone (not registered, or fenced and unsaid)
                brokers.setdefault(r, {"id": r, "host": None, "port": None, "rack": None, "fenced": True})
        topics.append({"name": name, "internal": name.startswith("__"), "partitions": parts})
    for b in brokers.values():
        b["controller"] = b["id"] == controller
        b["leaders"] = sum(1 for t in topics for p in t["partitions"] if p["leader"] == b["id"])
        b["replicas"] = sum(1 for t in topics for p in t["partitions"] if b["id"] in p["replicas"])
    every = [dict(p, topic=t["name"]) for t in topics for p in t["partitions"]]
    by_partition = {(p["topic"], p["partition"]): p for p in every}
    reassignments = None
    if moving is not None:
        reassignments = []
        for m in moving:
            known = by_partition.get((m.topic, m.partition), {})
            r = {"topic": m.topic, "partition": m.partition, "replicas": m.replicas, "adding": m.adding,
                 "removing": m.removing, "target": m.target, "leader": known.get("leader", -1),
                 "isr": known.get("isr", [])}
            r["progress"] = progress(r, m.progress)
            reassignments.append(r)
    return {"controller": controller,
            "brokers": sorted(brokers.values(), key=lambda b: b["id"]),
            "fenced_known": described is not None,
            "partitions": len(every),
            "under_replicated": [p for p in every if p["under_replicated"] and not p["offline"]],
            "offline": [p for p in every if p["offline"]],
            "topics": topics,
            "reassignments": reassignments}


def progress(r: dict, found: dict[int, tuple[int, int]]) -> dict:
    """How far a reassignment is: the replicas being added that joined the ISR (a reassignment completes when all
    have), and each other one's offset lag and bytes against the partition's largest replica (``found``: broker ->
    (offset lag, bytes), the largest replica's under -1; a fraction None where a size is not known)."""
    in_sync = [b for b in r["adding"] if b in r["isr"]]
    largest = found.get(-1, (0, None))[1]
    replicas = []
    for b in r["adding"]:
        lag, size = found.get(b, (None, None))
        fraction = 1.0 if b in in_sync else (
            round(min(size / largest, 1.0), 3) if size is not None and largest else None)
        replicas.append({"broker": b, "in_sync": b in in_sync, "bytes": size, "offset_lag": lag,
                         "largest_bytes": largest, "fraction": fraction})
    known = [x["fraction"] for x in replicas if x["fraction"] is not None]
    return {"in_sync": len(in_sync), "adding": len(r["adding"]), "replicas": replicas,
            "fraction": round(sum(known) / len(known), 3) if known else None,  # of the replicas with a size
            "line": f"{len(in_sync)} of {len(r['adding'])} new replicas in sync" + "".join(
                f"; broker {x['broker']} at {x['fraction']:.0%}"
                + (f" ({x['offset_lag']} records behind)" if x["offset_lag"] else "")
                for x in replicas if not x["in_sync"] and x["fraction"] is not None)}
