"""``freshet``: run the broker, manage topics, produce and consume."""

from __future__ import annotations

import os

import click

from .broker_cmd import broker
from .cdc_cmd import cdc, search
from .cep_cmd import rules, watch
from .dashboard_cmd import dashboard, pipelines
from .demo_cep import alerts_demo, intrusion_demo
from .demo_cmd import demo
from .demo_enrollment import enrollment_demo
from .demo_ingest import ingest_demo
from .demo_redelivery import redelivery_demo
from .es_cmd import es
from .gen_cmd import gen
from .groups_cmd import groups
from .ingest_cmd import ingest, webhook
from .queue_cmd import queue
from .records_cmd import consume, produce
from .security_cmd import acl, security, users
from .run_cmd import run
from .spark_cmd import spark
from .timeline_cmd import timeline
from .topic_cmd import topic
from .transactions_cmd import transactions


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="freshet")
@click.option("--command-config", type=click.Path(dir_okay=False), default=None,
              help="Client security settings for a secured cluster (security.protocol, sasl.*, ssl.*), as Kafka's "
                   "tools take them; or FRESHET_SECURITY_PROTOCOL, FRESHET_SASL_USERNAME, ... variables.")
def cli(command_config: str | None) -> None:
    """Freshet: stream processing on a Kafka-protocol log."""
    if command_config:
        os.environ["FRESHET_COMMAND_CONFIG"] = os.path.abspath(command_config)  # every client takes it from here


cli.add_command(broker)
cli.add_command(topic)
cli.add_command(produce)
cli.add_command(consume)
cli.add_command(gen)
cli.add_command(groups)
cli.add_command(queue)
cli.add_command(users)
cli.add_command(acl)
cli.add_command(security)
demo.add_command(enrollment_demo)
demo.add_command(ingest_demo)
demo.add_command(intrusion_demo)
demo.add_command(alerts_demo)
demo.add_command(redelivery_demo)
cli.add_command(demo)
cli.add_command(run)
cli.add_command(spark)
cli.add_command(cdc)
cli.add_command(search)
cli.add_command(dashboard)
cli.add_command(pipelines)
cli.add_command(timeline)
cli.add_command(transactions)
cli.add_command(es)
cli.add_command(ingest)
cli.add_command(webhook)
cli.add_command(rules)
cli.add_command(watch)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
