"""Spark Structured Streaming on Freshet (or any Kafka cluster): the ``freshet`` data source and sinks."""

from .session import kafka_security_options, register, session

__all__ = ["kafka_security_options", "register", "session"]
