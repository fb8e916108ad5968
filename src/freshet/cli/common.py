"""What every client command shares: the --bootstrap option, one-line errors, Spark's noise kept off the terminal."""

from __future__ import annotations

import functools
import os
import signal
import sys
from contextlib import contextmanager

import click
from confluent_kafka import KafkaException

from freshet.client import DEFAULT_BOOTSTRAP, ClientError

bootstrap_option = click.option(
    "--bootstrap", "-b", envvar="FRESHET_BOOTSTRAP", default=DEFAULT_BOOTSTRAP, show_default=True,
    help="Kafka bootstrap servers (env FRESHET_BOOTSTRAP).",
)


def one_line_errors(fn):
    """ClientError, a Kafka error, a Spark or Freshet cluster on this machine that cannot be started or found, and
    a file that cannot be read or written become one line on stderr and exit status 1 (Ctrl-C: 130)."""

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
        except OSError as exc:  # a file or directory the command was given cannot be read or written
            where = f": {exc.filename}" if exc.filename else ""
            click.echo(f"error: {exc.strerror or exc}{where}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            sys.exit(130)
        except Exception as exc:
            if not _from_local_cluster(exc):
                raise
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)

    return wrapper


@contextmanager
def stderr_to(path: str):
    """Send this process's standard error (file descriptor 2), and so that of every process it starts
    meanwhile, to ``path``; restore it after. The Spark JVM and its Python workers write their logs and
    shutdown noise (a stopped query's source worker finding its socket closed) there, not over the
    live table on standard output. Yields a text stream on the original standard error, for what the
    user must see."""
    sys.stderr.flush()
    terminal = os.dup(2)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    shown = os.fdopen(os.dup(terminal), "w", buffering=1)
    try:
        yield shown
    finally:
        shown.close()
        sys.stderr.flush()
        os.dup2(terminal, 2)
        os.close(terminal)


def stopping_on_signals(stop) -> None:
    """Ctrl-C and SIGTERM end the loop between batches (a KeyboardInterrupt raised inside a librdkafka call
    or callback, mid-transaction or mid-rebalance, could leave the consumer's close waiting)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop())


def _from_local_cluster(exc: Exception) -> bool:
    """Whether ``exc`` is a SparkClusterError or a (Freshet) ClusterError: only a command that imported
    freshet.local.spark_cluster or freshet.local.cluster can raise one, so the modules are looked up, not
    imported (they cost every other command start-up time)."""
    for module_name, error in (("freshet.local.spark_cluster", "SparkClusterError"),
                               ("freshet.local.cluster", "ClusterError")):
        module = sys.modules.get(module_name)
        if module is not None and isinstance(exc, getattr(module, error)):
            return True
    return False
