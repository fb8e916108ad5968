"""Freshet: a stream-processing platform on a Kafka-protocol log."""

__version__ = "0.1.0"
