"""``freshet``: run the broker, manage topics, produce and consume.

Each command is imported only when it runs (:class:`LazyGroup`): ``freshet --help`` and a client command do not
pay for the broker, Spark or the other commands' libraries.
"""

from __future__ import annotations

import os

import click

from .lazy import LazyGroup

# command -> (where it is, its short help: the first sentence of its docstring)
COMMANDS = {
    "acl": ("freshet.cli.security_cmd:acl",
            "Access control lists: which principal may do what to which topic, group or transactional id."),
    "broker": ("freshet.cli.broker_cmd:broker", "Run the Freshet broker."),
    "cdc": ("freshet.cli.cdc_cmd:cdc", "Change data capture: databases as streams."),
    "cluster": ("freshet.cli.cluster_cmd:cluster", "A cluster of Freshet brokers and controllers on this machine."),
    "consume": ("freshet.cli.records_cmd:consume", "Print records of TOPIC, one per line."),
    "dashboard": ("freshet.cli.dashboard_cmd:dashboard",
                  "Serve the web dashboard: topics, groups and lag, pipelines, live charts, /metrics."),
    "demo": ("freshet.cli.demos:demo", "Runnable demonstrations."),
    "es": ("freshet.cli.es_cmd:es", "Event sourcing: commands, events, state, projections, forgetting."),
    "gen": ("freshet.cli.gen_cmd:gen", "Generate events into a topic."),
    "groups": ("freshet.cli.groups_cmd:groups",
               "Consumer groups and share groups: members, committed offsets, lag, queue state, offset resets."),
    "ingest": ("freshet.cli.ingest_cmd:ingest",
               "Events in without a Kafka client: HTTP (REST Proxy v2/v3, beacons), syslog, StatsD."),
    "pipelines": ("freshet.cli.dashboard_cmd:pipelines", "Pipelines registered by freshet run."),
    "produce": ("freshet.cli.records_cmd:produce",
                "Produce one record per line of standard input to TOPIC (idempotent, acks=all)."),
    "queue": ("freshet.cli.queue_cmd:queue",
              "Queues on the log: competing consumers in a share group, each record acknowledged on its own."),
    "rules": ("freshet.cli.cep_cmd:rules",
              "CEP rules (MATCH_RECOGNIZE with WITHIN and absence) that `freshet run cep` matches."),
    "run": ("freshet.cli.run_cmd:run", "Run PIPELINE from a topic to a sink until stopped (Ctrl-C stops it cleanly)."),
    "search": ("freshet.cli.cdc_cmd:search",
               "Full-text QUERY (FTS5 syntax) over an index kept by `freshet cdc index`; one JSON row per line."),
    "security": ("freshet.cli.security_cmd:security", "TLS material for local use."),
    "sql": ("freshet.cli.sql_cmd:sql",
            "SQL over streams and tables declared on topics: push queries, persistent queries, Spark SQL."),
    "spark": ("freshet.cli.spark_cmd:spark",
              "A Spark standalone cluster (master and workers) and a Spark Connect server on this machine."),
    "timeline": ("freshet.cli.timeline_cmd:timeline",
                 "USER's home timeline, newest first: the tweets of everyone USER follows."),
    "topic": ("freshet.cli.topic_cmd:topic", "Create, list, describe and delete topics."),
    "transactions": ("freshet.cli.transactions_cmd:transactions",
                     "Kafka transactions: which are open, and what they hold back."),
    "users": ("freshet.cli.security_cmd:users",
              "SASL/SCRAM users: credentials kept salted and hashed by the broker (AlterUserScramCredentials)."),
    "watch": ("freshet.cli.cep_cmd:watch",
              "Stored search queries that `freshet run watch` matches against every new event."),
    "webhook": ("freshet.cli.ingest_cmd:webhook",
                "POST each record of a topic to a URL: signed, retried, at least once, dead-lettered after failures."),
}


COMMAND_CONFIG_HELP = ("Client security settings for a secured cluster (security.protocol, sasl.*, ssl.*), as "
                       "Kafka's tools take them; or FRESHET_SECURITY_PROTOCOL, FRESHET_SASL_USERNAME, ... variables.")


def _use_command_config(ctx: click.Context, param: click.Parameter, path: str | None) -> None:
    if path:
        os.environ["FRESHET_COMMAND_CONFIG"] = os.path.abspath(path)  # every client takes it from here


def _command_config_option() -> click.Option:
    return click.Option(["--command-config"], type=click.Path(dir_okay=False), default=None, expose_value=False,
                        callback=_use_command_config, help=COMMAND_CONFIG_HELP)


def with_command_config(command: click.Command) -> click.Command:
    """Every command with --bootstrap (a client of the cluster) takes --command-config after its name too, as
    kafka-topics.sh and the console clients take it (``freshet topic list --command-config client.properties``),
    besides before it (``freshet --command-config client.properties topic list``)."""
    for sub in getattr(command, "commands", {}).values():
        with_command_config(sub)
    names = {p.name for p in command.params}
    if "bootstrap" in names and "command_config" not in names:
        command.params.append(_command_config_option())
    return command


class UsageRefused(click.ClickException):
    """A usage error (a missing argument, an unknown command or option, a value of the wrong type) as every other
    refusal of Freshet's commands: one line on stderr, exit 1 (click's own is three lines and exit 2)."""

    exit_code = 1

    def __init__(self, error: click.UsageError):
        command = error.ctx.command_path if error.ctx else "freshet"
        message = error.format_message().rstrip(".")
        if message[1:2].islower():
            message = message[:1].lower() + message[1:]
        super().__init__(f"{command}: {message} (see {command} --help)")

    def show(self, file=None) -> None:
        click.echo(self.message, err=True)


def _refused(error: click.UsageError) -> click.ClickException:
    """A usage error as Freshet refuses it; a group run without a command shows its help as it is (exit 1)."""
    if isinstance(error, click.exceptions.NoArgsIsHelpError):
        error.exit_code = 1
        return error
    return UsageRefused(error)


class FreshetGroup(LazyGroup):
    def make_context(self, *args, **kwargs) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as e:
            raise _refused(e) from None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)  # the subcommands' own parsing happens in here
        except click.UsageError as e:
            raise _refused(e) from None

    def load(self, cmd_name: str) -> click.Command:
        # kio (the broker's protocol schemas) registers Hypothesis strategies when Hypothesis is installed (a test
        # dependency, so in `make demo`'s venv), and Hypothesis then caches Unicode tables in ./.hypothesis of
        # whatever directory the broker or a demo runs in: in the user's cache instead, set before the import.
        os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                              os.path.join(os.path.expanduser("~"), ".cache", "freshet", "hypothesis"))
        return with_command_config(super().load(cmd_name))


@click.group(cls=FreshetGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="freshet")
@click.option("--command-config", type=click.Path(dir_okay=False), default=None, expose_value=False,
              callback=_use_command_config, help=COMMAND_CONFIG_HELP)
def cli() -> None:
    """Freshet: stream processing on a Kafka-protocol log."""


def main() -> None:
    cli(prog_name="freshet")  # also under `python -m freshet.cli.main`


if __name__ == "__main__":
    main()
