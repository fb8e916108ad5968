"""What a handler is given and what it returns.

A handler is a function ``(ctx, request) -> response``: ``request`` is the kio dataclass of the API
version the client sent (older versions lack newer fields: handlers read those with ``getattr`` and
a default), and the response is a dict that ``protocol.build`` turns into that version's response,
None (no response, as for acks=0), or an awaitable of either (long-polls, acks=all).

A handler reaches the broker through ``ctx.broker``, typed as ``BrokerServices``: the parts of the broker a
handler may use, declared here without importing the server (which imports every handler);
``server.Broker`` provides them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from freshet.format.framing import RequestHeader

from .security import acls

if TYPE_CHECKING:
    from .cluster import ClusterMembership
    from .config import BrokerConfig
    from .durability import GroupCommit
    from .groups.classic import GroupCoordinator
    from .groups.consumer import ConsumerGroupCoordinator
    from .groups.offsets import OffsetStore
    from .groups.share import ShareGroupCoordinator
    from .quotas import ClientQuotas
    from .replication.manager import ReplicaManager
    from .security.acls import Authorizer
    from .security.credentials import CredentialStore
    from .security.listeners import Listener
    from .security.sasl import FailedLogins, SaslSession
    from .telemetry import ClientTelemetry
    from .topics.dynamic_config import DynamicBrokerConfigs
    from .topics.registry import TopicRegistry
    from .transactions import TransactionCoordinator

Request: TypeAlias = Any  # a kio request dataclass, of the version in ``ctx.header.api_version``
Response: TypeAlias = dict | None | Awaitable[dict | None]


@runtime_checkable
class BrokerServices(Protocol):
    """What a handler may use of the broker: its settings, stores and coordinators, and three calls back."""

    config: "BrokerConfig"
    apis: "dict[int, tuple[int, int, Handler]]"  # api key -> (lowest, highest version, handler) served
    registry: "TopicRegistry"
    dynamic: "DynamicBrokerConfigs"
    group_commit: "GroupCommit | None"  # set when the broker starts, before any request is read
    groups: "GroupCoordinator"
    consumer_groups: "ConsumerGroupCoordinator"
    share_groups: "ShareGroupCoordinator"
    offsets: "OffsetStore"
    transactions: "TransactionCoordinator"
    quotas: "ClientQuotas"
    telemetry: "ClientTelemetry"
    credentials: "CredentialStore"
    failed_logins: "FailedLogins"
    authorizer: "Authorizer | None"  # None: no listener authenticates, every request is allowed
    cluster: "ClusterMembership | None"  # cluster mode (issue #46): the controllers' metadata (``.view``); else None
    replicas: "ReplicaManager | None"  # cluster mode: leaders, followers, ISR; else None

    @property
    def default_partitions(self) -> int:
        """num.partitions: the partitions of a topic created without a count."""
        ...

    def advertised(self, listener: "Listener | None") -> tuple[str, int]:
        """The host and port a client of ``listener`` is told to connect to."""
        ...

    def alter_dynamic_configs(self, level: str, values: dict[str, str]) -> None:
        """Replace one level's dynamic broker configs (already checked), persist them and apply them."""
        ...

    def clean_soon(self, topic_name: str) -> None:
        """Retention and compaction for one topic now (its configs changed)."""
        ...


@dataclass
class Connection:
    """One client connection: the listener it came in on, and who it is (the principal ACLs are checked for)."""

    listener: "Listener"
    peer_host: str  # the client's address, without the leading "/"
    sasl: "SaslSession | None" = None  # on SASL listeners
    certificate_principal: str | None = None  # mutual TLS: User:CN=...
    close_after_response: bool = False  # a failed authentication: answer, then close (as Kafka does)
    deadline: float | None = None  # loop time by which the read under way must finish (the broker's watchdog)
    client_software: str = ""  # "name version", from ApiVersions v3+ (KIP-511)

    @property
    def principal(self) -> str:
        if self.sasl is not None and self.sasl.principal is not None:
            return self.sasl.principal
        return self.certificate_principal or "User:ANONYMOUS"


@dataclass
class RequestContext:
    broker: BrokerServices
    header: RequestHeader
    peer_host: str = ""
    throttle_ms: int = 0  # set by a handler over quota: the connection is muted this long
    connection: Connection | None = None

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def user(self) -> str:
        """The principal's name without its type (``alice`` for User:alice), as user quotas name it."""
        principal = self.connection.principal if self.connection is not None else "User:ANONYMOUS"
        return principal.split(":", 1)[1] if ":" in principal else principal

    def allowed(self, operation: int, resource_type: int, name: str) -> bool:
        """Whether this request's principal may do ``operation`` on the resource (always, without ACLs)."""
        authorizer = self.broker.authorizer
        if authorizer is None or self.connection is None:
            return True
        return authorizer.authorize(self.connection.principal, self.connection.peer_host, operation,
                                    resource_type, name)

    def authorized_operations(self, resource_type: int, name: str) -> int:
        """KIP-430: the bit field of the operations this request's principal may do on the resource (all of them
        without ACLs), for Metadata, DescribeCluster, DescribeTopicPartitions and the group describes."""
        return acls.authorized_operations(lambda operation: self.allowed(operation, resource_type, name), resource_type)

    def allowed_on_some(self, operation: int, resource_type: int) -> bool:
        """Whether this request's principal may do ``operation`` on some resource of the type (existing or not)."""
        authorizer = self.broker.authorizer
        if authorizer is None or self.connection is None:
            return True
        return authorizer.authorize_by_resource_type(self.connection.principal, self.connection.peer_host,
                                                     operation, resource_type)


Handler = Callable[[RequestContext, Request], Response]
