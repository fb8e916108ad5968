"""The Kafka wire-protocol broker over the Freshet log."""

from .config import BrokerConfig

__all__ = ["Broker", "BrokerConfig", "run_broker"]


def __getattr__(name: str):
    # the server (kio, the log) loads only when asked for: `freshet --help` needs just BrokerConfig
    if name in ("Broker", "run_broker"):
        from . import server

        return getattr(server, name)
    raise AttributeError(name)
