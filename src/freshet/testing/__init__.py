"""Helpers to run a real broker process for tests and benchmarks."""

from .broker_process import BrokerProcess, free_port

__all__ = ["BrokerProcess", "free_port"]
