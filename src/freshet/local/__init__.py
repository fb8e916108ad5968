"""Processes the product starts on this machine: a broker, a throwaway PostgreSQL, a Spark standalone cluster
(``spark_cluster``), used by ``make demo``, the CLI, the benchmarks and the tests. Each is a context manager
that always stops what it started."""

from .broker import BrokerProcess, free_port
from .postgres import PostgresServer

__all__ = ["BrokerProcess", "PostgresServer", "free_port"]
