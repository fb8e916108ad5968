"""``ClusterMembership``: a broker's life in a cluster run by the controllers.

- **Registration** (BrokerRegistration): at start, on the session connection, with this process's incarnation id;
  another live broker with the same node id is refused (DUPLICATE_BROKER_REGISTRATION) and this broker stops
  with one line. A broker is fenced until its first heartbeat, as in KRaft.
- **Heartbeats** (BrokerHeartbeat) every ``heartbeat_interval_ms`` on the same connection, the broker's
  *session*: when it closes (this process killed -9, or stopped) the controller at its other end fences the
  broker at once and its leaderships move; a broker that only stops answering (SIGSTOP) is fenced after the
  controllers' session timeout. A controller that does not answer within ``heartbeat_timeout_s`` is left for
  the next one (the session moves with it). That is longer than a controller takes to answer (it answers
  NOT_CONTROLLER or REQUEST_TIMED_OUT within 10 s, and waits out an election of the active controller): a
  session closed by the broker itself would fence it, so only a dead or hung controller is left.
- **Metadata**: a long poll on another connection (``{"op": "metadata", "since": version}``); each new
  snapshot becomes the ``ClusterView``, then the local topics follow it (every topic with a replica here exists
  in the registry with the controller's topic id and partition count, topics the metadata dropped are deleted;
  the internal ``__`` topics stay local), then the replica manager is given every partition and broker.
- **Commands** (CreateTopics, DeleteTopics, CreatePartitions, configs, AlterPartition, producer id blocks) go to
  the controller on a third connection, retried while no controller is active.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Callable

from freshet.controller.client import AsyncControllerClient

from ..groups import consumer_records, group_metadata
from ..groups.offsets import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIGS
from ..groups.share import SHARE_STATE_TOPIC
from ..groups.topics import ClusterTopics
from ..replication.metadata import BrokerEndpoint, PartitionState
from ..topics.registry import TopicError
from ..topics.topic_config import CONFIG_DEFS
from ..security.credentials import ScramCredential
from .admin import acl_bindings, alter_scram_credentials, scram_credentials
from .view import ClusterView, TopicInfo

log = logging.getLogger(__name__)

DEFAULT_HEARTBEAT_INTERVAL_MS = 2000  # Kafka's broker.heartbeat.interval.ms
RETRIABLE = {"NOT_CONTROLLER", "REQUEST_TIMED_OUT"}
PRODUCER_ID_BLOCK = 1000  # Kafka's producer id block size
CONTROLLED_SHUTDOWN_TIMEOUT_S = 30.0  # how long a stopping broker waits for its leaderships to move


class ClusterError(Exception):
    """This broker cannot be (or stay) a member: the message is the one line the CLI prints."""


def parse_controllers(text: str) -> list[tuple[str, int]]:
    """``HOST:PORT,HOST:PORT,...``: the controllers' endpoints (Kafka's controller.quorum.bootstrap.servers)."""
    addresses = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"controller {item!r} is not HOST:PORT")
        addresses.append((host, int(port)))
    if not addresses:
        raise ValueError("give the controllers as HOST:PORT,HOST:PORT,...")
    return addresses


class ClusterProducerIds:
    """Producer ids from blocks the controller hands out (AllocateProducerIds, KIP-730), unique in the cluster:
    ``allocate()`` stays synchronous (InitProducerId and the transaction coordinator call it), the next block is
    fetched in the background once half of the current one is used."""

    def __init__(self, membership: "ClusterMembership") -> None:
        self._membership = membership
        self._blocks: list[tuple[int, int]] = []  # [start, end) of the blocks held
        self._refill: asyncio.Task | None = None

    async def fill(self) -> None:
        answer = await self._membership.command({
            "command": "AllocateProducerIds", "broker_id": self._membership.node_id,
            "broker_epoch": self._membership.epoch, "count": PRODUCER_ID_BLOCK})
        if answer["error"] != "NONE":
            raise ClusterError(f"no producer ids from the controller: {answer['error']} {answer['message']}")
        start = answer["value"]["start"]
        self._blocks.append((start, start + answer["value"]["count"]))

    def allocate(self) -> int:
        if not self._blocks:
            raise TopicError(-1, "no producer id block from the controller yet")
        start, end = self._blocks[0]
        self._blocks[0] = (start + 1, end)
        if start + 1 == end:
            self._blocks.pop(0)
        left = sum(e - s for s, e in self._blocks)
        if left < PRODUCER_ID_BLOCK // 2 and (self._refill is None or self._refill.done()):
            self._refill = asyncio.get_running_loop().create_task(self._fill_logged(), name="producer-id-block")
        return start

    async def _fill_logged(self) -> None:
        try:
            await self.fill()
        except (ClusterError, ConnectionError) as exc:
            log.warning("%s", exc)

    def max_producer_id(self) -> int:
        return max((e for _, e in self._blocks), default=0) - 1


class ClusterMembership:
    def __init__(self, broker, controllers: list[tuple[str, int]], node_id: int, rack: str | None = None,
                 heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS, heartbeat_timeout_s: float = 15.0,
                 registration_timeout_s: float = 120.0) -> None:
        self.broker = broker
        self.controllers = controllers
        self.node_id = node_id
        self.rack = rack
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.registration_timeout_s = registration_timeout_s
        self.incarnation_id = uuid.uuid4().hex
        self.epoch: int | None = None
        self.view = ClusterView()
        self._session = AsyncControllerClient(controllers)  # registration and heartbeats: the broker's session
        self._poller = AsyncControllerClient(controllers)  # the metadata long poll
        self._commands = AsyncControllerClient(controllers)  # everything else
        self._changed: asyncio.Condition | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self.producer_ids = ClusterProducerIds(self)
        self._creating: dict[str, asyncio.Task] = {}  # internal topics being created through the controller
        self.on_fatal: Callable[[str], None] | None = None  # the broker stops when its membership cannot go on
        # the groups and commits of __consumer_offsets are taken over for the view's leadership of it (coordinates)
        self._groups_taken_over = False

    # -- life ----------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Registers, takes the metadata and follows it, heartbeats (unfenced), and returns once this broker's
        view shows it unfenced: the broker serves clients from then on, with metadata that lists it."""
        self._changed = asyncio.Condition()
        self._attach_coordinators()
        await self._register()
        await self.producer_ids.fill()
        await self._apply(await self._poller.request({"op": "metadata"}))
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._follow(), name="cluster-metadata")]
        await self._heartbeat()
        self._tasks.append(loop.create_task(self._heartbeats(), name="cluster-heartbeats"))
        if not await self.wait_for(lambda v: self.node_id in {b.node_id for b in v.live_brokers()},
                                   self.registration_timeout_s):
            raise ClusterError(f"broker {self.node_id} was not unfenced by the controllers within "
                               f"{self.registration_timeout_s:.0f} s")
        await self._bootstrap_inter_broker_user()

    def _attach_coordinators(self) -> None:
        """The group coordinators store into ``__consumer_offsets`` and assign the topics of the metadata."""
        self.broker.groups.on_change = self._store_group  # a group's membership moves with its coordinator
        self._consumer_groups = consumer_records.ConsumerGroupStore(self.broker.consumer_groups, self.broker.offsets)
        self.broker.consumer_groups.on_change = self._store_consumer_group  # a KIP-848 group's too
        # a KIP-848 group is assigned every topic of the metadata, not only those this broker holds a replica of
        self.broker.consumer_groups.topics = ClusterTopics(lambda: self.view)
        self.broker.share_groups.topics = ClusterTopics(lambda: self.view)  # a share group's as well

    async def _bootstrap_inter_broker_user(self) -> None:
        """The inter-broker login's user (``--inter-broker-user``) in the cluster's SCRAM users, added by the first
        broker that finds it missing, as ``kafka-storage format --add-scram`` adds it before Kafka's first start
        (a user that exists is left as it is: a broker with another password fails to log in to the others)."""
        login = self.broker.config.security.inter_broker_login()
        if login is None:
            return
        mechanism, user, password = login
        mechanism = mechanism if mechanism != "PLAIN" else "SCRAM-SHA-256"  # PLAIN checks the SCRAM credential
        if mechanism in self.view.scram.get(user, {}):
            return
        credential = ScramCredential.from_password(mechanism, password)
        refused = await alter_scram_credentials(self.broker, [(user, credential)], [])
        if refused:
            raise ClusterError(f"the inter-broker user {user} could not be added: {refused[user]}")
        log.info("inter-broker user %s added to the cluster's SCRAM users (%s)", user, mechanism)

    async def stop(self) -> None:
        """Hands its leaderships over (controlled shutdown) when it was serving, then stops heartbeating; closing
        the session fences this broker at once (what it still leads moves then)."""
        if not self._stopping and self.epoch is not None and self._tasks:
            await self.controlled_shutdown()
        self._stopping = True
        pending = set(self._tasks)
        while pending:  # cancelled again until they end: asyncio.wait_for may swallow a cancellation (3.11)
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=1.0)
        for client in (self._session, self._poller, self._commands):
            await client.close()

    async def controlled_shutdown(self, timeout_s: float = CONTROLLED_SHUTDOWN_TIMEOUT_S) -> bool:
        """Before this broker stops (SIGTERM): the controllers move every partition it leads to another ISR member
        and take it out of the ISRs (ControlledShutdown, as KRaft's BrokerHeartbeat WantShutDown); it waits until
        its own metadata shows it leads nothing another live replica could lead, ``timeout_s`` at most, so that
        clients are sent to the new leaders before it goes. True when it got there."""
        end = time.monotonic() + timeout_s
        answer = await self.command({"command": "ControlledShutdown", "broker_id": self.node_id,
                                     "broker_epoch": self.epoch}, timeout_s=min(timeout_s, 10.0))
        if answer["error"] != "NONE":
            log.warning("controlled shutdown refused: %s %s; stopping anyway", answer["error"], answer["message"])
            return False
        kept = (answer.get("value") or {}).get("kept") or []
        done = await self.wait_for(self._handed_over, max(end - time.monotonic(), 0.0))
        log.info("controlled shutdown: %s%s", "leaderships handed over" if done else
                 f"leaderships not all handed over within {timeout_s:.0f} s",
                 f"; kept (no other live ISR member): {', '.join(kept)}" if kept else "")
        return done

    def _handed_over(self, view: ClusterView) -> bool:
        """This broker leads no partition that has another ISR member."""
        return all(p.leader != self.node_id or p.isr == (self.node_id,)
                   for t in view.topics.values() for p in t.partitions)

    async def _register(self) -> None:
        host, port = self.broker.advertised(None)
        command = {"command": "RegisterBroker", "broker_id": self.node_id, "incarnation_id": self.incarnation_id,
                   "host": host, "port": port, "rack": self.rack}
        end = time.monotonic() + self.registration_timeout_s
        while True:
            try:
                answer = await self._session.command(command, session=True, timeout=15)
            except ConnectionError as exc:
                answer = {"error": "CONNECTION", "message": str(exc)}
            if answer["error"] == "NONE":
                self.epoch = answer["value"]["broker_epoch"]
                log.info("registered as broker %d (epoch %d) with the controllers %s", self.node_id, self.epoch,
                         self.controllers)
                return
            if answer["error"] == "DUPLICATE_BROKER_REGISTRATION":
                raise ClusterError(f"node id {self.node_id} is already registered by another live broker "
                                   "(DUPLICATE_BROKER_REGISTRATION): give each broker its own --node-id")
            if answer["error"] not in RETRIABLE | {"CONNECTION"}:
                raise ClusterError(f"the controllers refused the registration: {answer['error']} {answer['message']}")
            if time.monotonic() > end:
                raise ClusterError(f"no active controller at {self._addresses()} within "
                                   f"{self.registration_timeout_s:.0f} s ({answer['message']})")
            await asyncio.sleep(0.5)

    def _addresses(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.controllers)

    async def _heartbeat(self) -> dict:
        answer = await self._session.command(
            {"command": "BrokerHeartbeat", "broker_id": self.node_id, "broker_epoch": self.epoch},
            session=True, timeout=self.heartbeat_timeout_s)
        if answer["error"] in ("STALE_BROKER_EPOCH", "BROKER_ID_NOT_REGISTERED"):
            log.warning("the controllers no longer know this broker's session (%s): registering again",
                        answer["error"])
            self.incarnation_id = uuid.uuid4().hex
            await self._register()
            answer = await self._heartbeat()
        return answer

    async def _heartbeats(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)
            try:
                answer = await self._heartbeat()
                if answer["error"] != "NONE":
                    log.warning("heartbeat: %s %s", answer["error"], answer["message"])
            except ConnectionError as exc:
                log.warning("heartbeat: %s", exc)
            except ClusterError as exc:
                log.error("%s", exc)
                if self.on_fatal:
                    self.on_fatal(str(exc))
                return

    async def _follow(self) -> None:
        while not self._stopping:
            try:
                snapshot = await self._poller.request(
                    {"op": "metadata", "since": self.view.version, "wait_ms": 5000}, timeout=40)
            except ConnectionError as exc:
                log.warning("metadata: %s", exc)
                await asyncio.sleep(0.5)
                continue
            if not await self._apply(snapshot):
                await asyncio.sleep(0.1)  # a controller behind the one seen before: wait for it to catch up

    # -- the metadata --------------------------------------------------------------------------------------
    async def _apply(self, snapshot: dict) -> bool:
        """Takes a snapshot newer than the view: the view, the local topics, then the replica manager."""
        if "brokers" not in snapshot or snapshot.get("offset", -1) < self.view.offset:
            return False
        view = ClusterView.from_snapshot(snapshot)
        if view.offset == self.view.offset and view.version == self.view.version and view.controller_id == \
                self.view.controller_id:
            return True
        self._sync_topics(view)
        before, self.view = self.view, view
        if not self._leads_offsets(view):
            self._groups_taken_over = False  # no longer the groups' coordinator: nothing of them is written from here
        replicas = self.broker.replicas
        if replicas is not None:
            states = [PartitionState(t.name, t.topic_id, p.index, p.replicas, p.isr, p.leader, p.leader_epoch,
                                     p.partition_epoch)
                      for t in view.topics.values() for p in t.partitions]
            try:
                await replicas.apply(states, view.brokers)
            except Exception:
                log.exception("the replica manager failed to apply metadata version %d", view.version)
        if self.broker.authorizer is not None and view.acls != before.acls:
            self.broker.authorizer.replace(acl_bindings(view))
        if view.scram != before.scram:
            self.broker.credentials.replace(scram_credentials(view))
        if view.quotas != before.quotas:
            self.broker.quotas.replace(view.quotas)
        if view.group_configs != before.group_configs:
            self.broker.share_groups.take_configs(view.group_configs)
            self.broker.consumer_groups.take_configs(view.group_configs)
        if self._leads_offsets(view) and not self._groups_taken_over:
            # this broker is the groups' coordinator now: the commits its log replicated become its own (after the
            # replica manager made it the leader, which awaits: coordinates() is False until then)
            self.broker.offsets.reload()
            members = group_metadata.restore(self.broker.groups, group_metadata.read(self.broker.offsets.partition))
            members += consumer_records.restore(self._consumer_groups,
                                                consumer_records.read(self.broker.offsets.partition))
            log.info("coordinator of the groups: %d committed offsets of %d groups and %d members taken over",
                     sum(len(g) for g in self.broker.offsets.offsets.values()), len(self.broker.offsets.offsets),
                     members)
            self._groups_taken_over = True
        transactions = self.broker.transactions  # the transactions' coordinator, or not
        transactions.follow(self.led_epoch(transactions.topic))
        self.broker.share_groups.follow(self.led_epoch(SHARE_STATE_TOPIC))  # the share coordinator, or not
        async with self._changed:
            self._changed.notify_all()
        return True

    def _store_group(self, group) -> None:
        """A classic group's membership into the replicated ``__consumer_offsets``, by its coordinator (the next
        one takes the group over from it: group_metadata.restore)."""
        if self.coordinates():
            group_metadata.store(self.broker.offsets, group)

    def _store_consumer_group(self, group_id: str) -> int | None:
        """What changed of a KIP-848 group into ``__consumer_offsets``, by its coordinator (the next one takes the
        group over: consumer_records.restore); the last offset written."""
        return self._consumer_groups.changed(group_id) if self.coordinates() else None

    def leads(self, topic: str, index: int) -> bool:
        info = self.view.topics.get(topic)
        return info is not None and index < len(info.partitions) and info.partitions[index].leader == self.node_id

    def coordinates(self) -> bool:
        """This broker is the coordinator of the groups and transactions (the leader of __consumer_offsets) and has
        taken them over. From the view that makes it the leader until the takeover (the replica manager's apply
        awaits in between: 260 ms once at load 15) it is not: a group request there was answered from what this
        broker held before (a heartbeat UNKNOWN_MEMBER_ID, so the member rejoined and was assigned again; an
        OffsetFetch without the commits; a write into the log under the records it is about to replay). It answers
        NOT_COORDINATOR meanwhile and the client looks the coordinator up again (Kafka's, loading the partition,
        answers COORDINATOR_LOAD_IN_PROGRESS: retried as well)."""
        return self._groups_taken_over and self._leads_offsets(self.view)

    def _leads_offsets(self, view: ClusterView) -> bool:
        info = view.topics.get(OFFSETS_TOPIC)
        return info is not None and info.partitions[0].leader == self.node_id

    def led_epoch(self, topic: str) -> int | None:
        """The leader epoch of ``topic``'s partition 0 if this broker leads it, else None."""
        info = self.view.topics.get(topic)
        if info is None or info.partitions[0].leader != self.node_id:
            return None
        return info.partitions[0].leader_epoch

    def coordinator(self, topic: str = OFFSETS_TOPIC) -> BrokerEndpoint | None:
        """The broker FindCoordinator names: the leader of the replicated internal ``topic`` (``__consumer_offsets``
        for groups, ``__transaction_state`` for transactional ids), created through the controller the first
        time it is asked for; None until then and while it has no leader. Its leadership moves only when its
        broker is fenced, so every client finds the same coordinator, and the state moves with it."""
        info = self.view.topics.get(topic)
        if info is None:
            creating = self._creating.get(topic)
            if creating is None or creating.done():
                self._creating[topic] = asyncio.get_running_loop().create_task(
                    self._create_internal_topic(topic), name=f"create-{topic}")
            return None
        leader = self.view.brokers.get(info.partitions[0].leader)
        return leader if leader is not None and not leader.fenced else None

    async def _create_internal_topic(self, topic: str) -> None:
        """One partition, replication factor ``offsets.topic.replication.factor`` (3 by default; also
        transaction.state.log.*), the configs of this broker's own internal topic (``min.insync.replicas`` at most
        the factor). As Kafka, it is not created while fewer brokers are live: FindCoordinator answers
        COORDINATOR_NOT_AVAILABLE until then (created smaller, its coordinator could never fail over)."""
        factor = (self.broker.config.share_state_topic_replication_factor if topic == SHARE_STATE_TOPIC
                  else self.broker.config.offsets_topic_replication_factor)
        live = len(self.view.live_brokers())
        if live < factor:
            log.warning("not creating %s yet: %d live broker(s), its replication factor is %d", topic, live, factor)
            return
        local = self.broker.registry.get(topic)
        configs = dict(local.configs) if local is not None else dict(OFFSETS_TOPIC_CONFIGS)
        if "min.insync.replicas" in configs:
            configs["min.insync.replicas"] = str(min(int(configs["min.insync.replicas"]), factor))
        answer = await self.command({"command": "CreateTopic", "name": topic, "partitions": 1,
                                     "replication_factor": factor, "configs": configs})
        if answer["error"] not in ("NONE", "TOPIC_ALREADY_EXISTS"):
            log.warning("creating %s: %s %s", topic, answer["error"], answer["message"])

    def _sync_topics(self, view: ClusterView) -> None:
        """The local topics follow the metadata: those with a replica here exist with the controller's topic id,
        partition count and configs; the others are deleted (internal ``__`` topics stay local)."""
        registry = self.broker.registry
        mine = {name: t for name, t in view.topics.items()
                if any(self.node_id in p.replicas for p in t.partitions)}
        for name, local in list(registry.topics.items()):
            if name.startswith("__"):
                continue
            wanted = mine.get(name)
            if wanted is None or wanted.topic_id != local.topic_id:
                registry.delete(name)
        for name, topic in mine.items():
            try:
                self._sync_topic(registry, topic)
            except TopicError as exc:
                log.error("topic %s from the controller cannot be kept here: %s", name, exc)

    @staticmethod
    def _sync_topic(registry, topic: TopicInfo) -> None:
        configs = {k: v for k, v in topic.configs.items() if k in CONFIG_DEFS}  # the log's; others are the cluster's
        local = registry.get(topic.name)
        if local is not None and local.internal and local.topic_id != topic.topic_id:
            # the broker's own __consumer_offsets (made at start, its store holds it) becomes the cluster's replica
            registry.by_id.pop(local.topic_id, None)
            local.topic_id = topic.topic_id
            registry.by_id[local.topic_id] = local
            local.save()
            return
        if local is None:
            registry.create(topic.name, len(topic.partitions), configs=configs, topic_id=topic.topic_id)
            return
        if len(local.partitions) < len(topic.partitions):
            registry.add_partitions(topic.name, len(topic.partitions))
        if local.configs != configs and not local.internal:  # an internal topic's configs are the broker's
            registry.alter_configs(topic.name, configs)

    async def wait_for(self, predicate: Callable[[ClusterView], bool], timeout_s: float = 30.0) -> bool:
        """Waits until the view satisfies ``predicate`` (a change this broker asked for came back), or gives up."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: predicate(self.view)), timeout_s)
                return True
            except asyncio.TimeoutError:
                return False

    # -- commands ------------------------------------------------------------------------------------------
    async def command(self, command: dict, timeout_s: float = 30.0) -> dict:
        """A command through the controllers, retried while none is active (NOT_CONTROLLER, no connection) up to
        ``timeout_s``; then REQUEST_TIMED_OUT (the outcome of a timed-out command is unknown, as Kafka's)."""
        end = time.monotonic() + timeout_s
        while True:
            try:
                answer = await self._commands.command(command, timeout=max(end - time.monotonic(), 1.0))
                if answer.get("error") != "NOT_CONTROLLER":
                    return answer
            except ConnectionError as exc:
                answer = {"error": "REQUEST_TIMED_OUT", "error_code": 7, "message": str(exc), "value": None}
            if time.monotonic() > end:
                return answer
            await asyncio.sleep(0.2)

    async def alter_isr(self, topic: str, index: int, leader_epoch: int, partition_epoch: int,
                        new_isr: tuple[int, ...]) -> dict:
        """AlterPartition (KIP-497) for the replica manager: the leader changes a partition's ISR; the answer is
        the controller's (``error``, ``error_code``, ``message``, ``value`` {isr, partition_epoch})."""
        info = self.view.topics.get(topic)
        if info is None:
            return {"error": "UNKNOWN_TOPIC_OR_PARTITION", "error_code": 3, "message": f"no topic {topic!r}",
                    "value": None}
        return await self.command({
            "command": "AlterPartition", "broker_id": self.node_id, "broker_epoch": self.epoch,
            "topic_id": str(info.topic_id), "partition": index, "leader_epoch": leader_epoch,
            "partition_epoch": partition_epoch, "new_isr": list(new_isr)})
