"""Spark Structured Streaming on Freshet (or any Kafka cluster): the ``freshet`` data source and sinks."""

from .session import register, session

__all__ = ["register", "session"]
