"""Partition sizes on the brokers' disks, from DescribeLogDirs (Kafka's API for them; librdkafka has no call for
it, so kafka-python's admin client asks, with the same security settings as every other client of ours)."""

from __future__ import annotations

from . import kafka_python
from .config import resolve_bootstrap


class LogDirSizes:
    """``sizes()``: (topic, partition) -> bytes of one replica (the largest: the leader's, unless a follower
    is behind), kept connected between calls. Empty when the cluster will not say (an older broker, no DESCRIBE
    on the cluster, unreachable): sizes are then unknown, never wrong."""

    def __init__(self, bootstrap: str | None = None, timeout_ms: int = 5000) -> None:
        self.bootstrap = resolve_bootstrap(bootstrap)
        self.timeout_ms = timeout_ms
        self._admin = None

    def _connect(self):
        return kafka_python.admin_client(self.bootstrap, self.timeout_ms)

    def sizes(self, topics: list[str] | None = None) -> dict[tuple[str, int], int]:
        """Every topic's partitions, or those of ``topics`` only (the request names them)."""
        from kafka.errors import KafkaError

        out: dict[tuple[str, int], int] = {}
        try:
            if self._admin is None:
                self._admin = self._connect()
            for per_broker in self._admin.describe_log_dirs(topic_partitions=topics):
                for log_dir in per_broker.get("log_dirs", []):
                    if log_dir.get("error_code"):
                        continue
                    for topic in log_dir.get("topics", []):
                        for p in topic["partitions"]:
                            if p.get("is_future_key"):  # a replica being moved between directories
                                continue
                            where = (topic["name"], p["partition_index"])
                            out[where] = max(out.get(where, 0), p["partition_size"])
        except (KafkaError, OSError, KeyError, TypeError):
            self.close()  # connect again next time
            return {}
        return out

    def close(self) -> None:
        if self._admin is not None:
            try:
                self._admin.close()
            except Exception:
                pass
            self._admin = None
