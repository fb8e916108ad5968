"""What every client command shares: the --bootstrap option and one-line errors."""

from __future__ import annotations

import functools
import sys

import click
from confluent_kafka import KafkaException

from freshet.client import ClientError

bootstrap_option = click.option(
    "--bootstrap", "-b", envvar="FRESHET_BOOTSTRAP", default="127.0.0.1:9092", show_default=True,
    help="Kafka bootstrap servers (env FRESHET_BOOTSTRAP).",
)


def one_line_errors(fn):
    """ClientError (and Ctrl-C) become one line on stderr and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ClientError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else exc
            click.echo(f"error: {err.str() if hasattr(err, 'str') else err}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            sys.exit(130)

    return wrapper
