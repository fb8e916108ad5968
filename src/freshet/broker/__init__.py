"""The Kafka wire-protocol broker over the Freshet log."""

from .server import Broker, BrokerConfig, run_broker

__all__ = ["Broker", "BrokerConfig", "run_broker"]
