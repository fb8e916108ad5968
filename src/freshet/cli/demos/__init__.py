"""``freshet demo``: runnable demonstrations, one module each, imported only when the demo runs.

Each starts its own broker on a data directory of its own and tells its story step by step, checking what it
shows (exit 1 if a step does not hold): :mod:`.preamble` is what they share.
"""

from __future__ import annotations

import click

from ..lazy import LazyGroup

# demo -> (where it is, its short help: the first sentence of its docstring)
DEMOS = {
    "access-logs": ("freshet.cli.demos.access_logs:access_logs",
                    "Broker, generated web access logs, Spark window pipelines: results shown live."),
    "alerts": ("freshet.cli.demos.cep:alerts_demo",
               "Stored searches matched against every new listing on Spark: alerts as a full scan finds them."),
    "dual-writes": ("freshet.cli.demos.dual_writes:dual_writes_demo",
                    "Two writers, dual writes vs change data capture: which index ends up agreeing with the "
                    "database?"),
    "enrollment": ("freshet.cli.demos.enrollment:enrollment_demo",
                   "Event sourcing: commands, ordered decisions, projections, a projection added later, forgetting."),
    "ingest": ("freshet.cli.demos.ingest:ingest_demo",
               "HTTP (REST Proxy), syslog and StatsD in; a signed webhook with a dead-letter topic out."),
    "intrusion": ("freshet.cli.demos.cep:intrusion_demo",
                  "The lecture's intrusion-detection rules on Spark: the alerts are the planted attacks."),
    "sql": ("freshet.cli.demos.sql:sql_demo",
            "SQL over a topic: CREATE STREAM, push queries equal to the Python pipelines, EXPLAIN, errors, restarts."),
    "redelivery": ("freshet.cli.demos.redelivery:redelivery_demo",
                   "Queues vs logs: competing consumers, one killed, its jobs redelivered out of order; a consumer "
                   "group keeps order."),
}


@click.group(cls=LazyGroup, lazy_commands=DEMOS)
def demo() -> None:
    """Runnable demonstrations."""
