"""Topic-partition offsets as Spark's Kafka source writes them: {"topic": {"0": 42, "1": 7}}.

Plain functions over confluent-kafka, shared by the driver-side readers.
"""

from __future__ import annotations

import json
import re
import time

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from freshet.client import admin_config

EARLIEST, LATEST = -2, -1

Offsets = dict[str, dict[str, int]]


class SourceError(ValueError):
    """A source option or offset that cannot be honoured; the message says which."""


def parse_subscription(options: dict) -> tuple[str, object]:
    """Exactly one of subscribe / subscribePattern / assign, as Spark's Kafka source requires."""
    given = [k for k in ("subscribe", "subscribepattern", "assign") if options.get(k)]
    if len(given) != 1:
        raise SourceError("give exactly one of the options subscribe, subscribePattern, assign")
    kind = given[0]
    value = options[kind]
    if kind == "subscribe":
        topics = [t.strip() for t in value.split(",") if t.strip()]
        if not topics:
            raise SourceError("subscribe names no topic")
        return kind, topics
    if kind == "subscribepattern":
        try:
            return kind, re.compile(value)
        except re.error as exc:
            raise SourceError(f"subscribePattern {value!r} is not a valid regular expression: {exc}") from None
    try:
        assigned = json.loads(value)
        return kind, {t: [int(p) for p in ps] for t, ps in assigned.items()}
    except (ValueError, AttributeError, TypeError):
        raise SourceError(f'assign must be JSON like {{"topic": [0, 1]}}, got {value!r}') from None


class ClusterView:
    """Metadata and offsets of the subscribed topic-partitions, from the driver."""

    def __init__(self, bootstrap: str, kind: str, subscription: object, timeout: float = 10.0,
                 client_options: dict | None = None, retries: int = 3, retry_interval_s: float = 1.0) -> None:
        self.bootstrap = bootstrap
        # as Spark's Kafka source (fetchOffset.numRetries, fetchOffset.retryIntervalMs): offsets that cannot be
        # right are asked again this many times, this long apart
        self.retries = retries
        self.retry_interval_s = retry_interval_s
        self._admin: AdminClient | None = None
        self.kind = kind
        self.subscription = subscription
        self.timeout = timeout
        # consumer properties included: librdkafka takes them on an admin client (and ignores them)
        self.client_options = dict(client_options or {})

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            try:
                self._admin = AdminClient(admin_config(self.bootstrap, {"log_level": 0, **self.client_options}))
            except KafkaException as exc:
                err = exc.args[0] if exc.args else exc
                raise SourceError(f"Kafka client options: {err.str() if hasattr(err, 'str') else err}") from None
        return self._admin

    def __getstate__(self) -> dict:
        # readers are pickled to the executors; a librdkafka handle cannot travel
        state = dict(self.__dict__)
        state["_admin"] = None
        return state

    def partitions(self) -> list[tuple[str, int]]:
        md = self._metadata()
        found = []
        if self.kind == "assign":
            unknown = []
            for topic, parts in self.subscription.items():  # type: ignore[union-attr]
                known = md.topics.get(topic)
                for p in parts:
                    found.append((topic, p))
                    if known is None or known.error is not None or p not in known.partitions:
                        unknown.append(f"{topic}-{p}")
            if unknown:
                raise SourceError(f"assign names partition(s) {', '.join(unknown)}, which do not exist")
            return sorted(found)
        for name, topic in md.topics.items():
            if topic.error is not None or name.startswith("__"):
                continue
            if self.kind == "subscribe" and name in self.subscription:  # type: ignore[operator]
                found += [(name, p) for p in topic.partitions]
            elif self.kind == "subscribepattern" and self.subscription.fullmatch(name):  # type: ignore[union-attr]
                found += [(name, p) for p in topic.partitions]
        if self.kind == "subscribe":
            missing = set(self.subscription) - {t for t, _ in found}  # type: ignore[arg-type]
            if missing:
                raise SourceError(f"topic(s) {', '.join(sorted(missing))} do not exist")
        return sorted(found)

    def _metadata(self):
        """The cluster's metadata, asked again (``retries`` times, ``retry_interval_s`` apart) while librdkafka fails
        or has no answer in time: librdkafka sends a metadata request to one broker and, when that broker is killed
        with the request in flight, waits on it until the timeout ("Failed to get metadata: Local: Timed out"); the
        next request goes to a broker that is up. Spark's Kafka source retries its metadata and offset fetches alike
        (fetchOffset.numRetries); what still fails after the retries fails the query."""
        attempt = 0
        while True:
            try:
                return self.admin.list_topics(timeout=self.timeout)
            except KafkaException as exc:
                attempt += 1
                if attempt > self.retries:
                    raise SourceError(f"cannot reach the Kafka cluster: {exc}") from None
            time.sleep(self.retry_interval_s)

    def offsets(self, spec: str, partitions: list[tuple[str, int]],
                at_least: dict[tuple[str, int], int] | None = None) -> dict[tuple[str, int], int]:
        """Each partition's earliest or latest offset. Asked again (``retries`` times, ``retry_interval_s`` apart,
        the metadata refreshed) while librdkafka fails, does not answer in time or answers no offset (-1001): the
        leader it knew was just killed, and, for ``at_least`` (where a query stands), while a latest offset lies below it: a new leader
        tells its high watermark as it knew it as a follower until its followers' next fetches, and Kafka's
        answer in that moment (KIP-207's OFFSET_NOT_AVAILABLE) is retried likewise. Spark's Kafka source retries
        offsets below the known ones in the same way; what is still below after the retries is returned (the
        caller then fails or skips it per failOnDataLoss)."""
        if not partitions:
            return {}
        attempt = 0
        while True:
            problem = None
            try:
                found = self._list_offsets(spec, partitions)
            except KafkaException as exc:
                found, problem = None, f"cannot list offsets: {exc}"
            except TimeoutError:  # no answer in time (the request went to a leader just killed)
                found, problem = None, f"cannot list offsets: no answer in {self.timeout:.0f} s"
            else:
                unknown = sorted(tp for tp, offset in found.items() if offset < 0)
                if unknown:
                    problem = (f"cannot list offsets: no {spec} offset for "
                               f"{', '.join(f'{t}-{p}' for t, p in unknown)}")
            below = found is not None and problem is None and any(
                offset < at_least.get(tp, offset) for tp, offset in found.items()) if at_least else False
            if problem is None and not below:
                return found
            attempt += 1
            if attempt > self.retries:
                if problem is None:
                    return found
                raise SourceError(problem)
            time.sleep(self.retry_interval_s)
            try:  # the next request goes to the leaders the cluster names now
                self.admin.list_topics(timeout=self.timeout)
            except KafkaException:
                pass

    def _list_offsets(self, spec: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        make = OffsetSpec.earliest if spec == "earliest" else OffsetSpec.latest
        request = {TopicPartition(t, p): make() for t, p in partitions}
        # as Spark's Kafka source: a read_committed query ends its batches at the last stable offset
        committed = str(self.client_options.get("isolation.level", "")).lower() == "read_committed"
        isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        futures = self.admin.list_offsets(request, isolation_level=isolation, request_timeout=self.timeout)
        return {(tp.topic, tp.partition): f.result(self.timeout).offset for tp, f in futures.items()}


def to_json(offsets: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


def resolve(spec: str, default: str, view: ClusterView, partitions: list[tuple[str, int]],
            option: str = "offsets", refuse: str | None = None) -> dict[tuple[str, int], int]:
    """startingOffsets / endingOffsets (``option``): "earliest", "latest", or JSON with -2 / -1 per
    partition; partitions the JSON leaves out take ``default``. ``refuse`` ("earliest" or "latest") is
    the bound a batch read cannot have there, as in Spark's Kafka source (no batch starts at latest
    or ends at earliest)."""
    spec = (spec or default).strip()
    if spec == refuse:
        raise SourceError(f"{option} cannot be {refuse} for batch queries")
    if spec in ("earliest", "latest"):
        return view.offsets(spec, partitions)
    try:
        given = from_json(json.loads(spec))
    except (ValueError, AttributeError, TypeError):
        raise SourceError(f'{option} must be earliest, latest or JSON like {{"topic": {{"0": 42}}}}, got {spec!r}') \
            from None
    strangers = sorted(set(given) - set(partitions))
    if strangers:
        raise SourceError(f"{option} names {', '.join(f'{t}-{p}' for t, p in strangers)}, which this source "
                          "does not read")
    refused = {"earliest": EARLIEST, "latest": LATEST}.get(refuse or "")
    for (topic, partition), value in sorted(given.items()):
        if value == refused:
            raise SourceError(f"{option} for {topic}-{partition} cannot be {value} ({refuse}) for batch queries")
        if value < EARLIEST:
            raise SourceError(f"{option} for {topic}-{partition} cannot be {value} "
                              "(an offset, or -2 for earliest, -1 for latest)")
    earliest = view.offsets("earliest", partitions)
    latest = view.offsets("latest", partitions)
    out = {}
    for tp in partitions:
        value = given.get(tp, EARLIEST if default == "earliest" else LATEST)
        out[tp] = earliest[tp] if value == EARLIEST else latest[tp] if value == LATEST else value
    return out
