"""Conveniences over confluent-kafka: config presets and admin helpers. Not a new client."""

from .admin import PartitionInfo, TopicAdmin, TopicInfo
from .config import DEFAULT_BOOTSTRAP, TRANSACTIONAL_OFFSETS, admin_config, consumer_config, producer_config, resolve_bootstrap
from .errors import ClientError

__all__ = [
    "ClientError", "DEFAULT_BOOTSTRAP", "PartitionInfo", "TRANSACTIONAL_OFFSETS", "TopicAdmin", "TopicInfo",
    "admin_config", "consumer_config", "producer_config", "resolve_bootstrap",
]
