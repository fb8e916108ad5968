"""``freshet sql``: a SQL prompt (or ``-f file.sql``, ``-e "..."``) over streams and tables declared on topics."""

from __future__ import annotations

import datetime
import decimal
import json
import os
import sys
import tempfile

import click

from .common import bootstrap_option, stderr_to

PROMPT, MORE = "freshet> ", "      > "


@click.command("sql")
@click.option("-f", "--file", "script_file", type=click.Path(exists=True, dir_okay=False),
              help="Run the statements of this file, then exit.")
@click.option("-e", "--execute", "statements", help="Run these statements (separated by ;), then exit.")
@click.option("--master", envvar="FRESHET_SPARK_MASTER", default=None,
              help="Spark master: local[N] (default local[2]) or spark://HOST:PORT.")
@click.option("--remote", envvar="FRESHET_SPARK_REMOTE", default=None, help="A Spark Connect server, sc://HOST:PORT.")
@click.option("--spark-log", default=None, help="Where Spark's own log goes (default: a file in the temp directory).")
@click.option("--data-dir", envvar="FRESHET_DATA_DIR", default=None,
              help="Where persistent queries keep checkpoints and table copies (env FRESHET_DATA_DIR).")
@click.option("--serve", is_flag=True,
              help="Start the stored persistent queries again and keep them running until Ctrl-C (after -f/-e).")
@bootstrap_option
def sql(script_file: str | None, statements: str | None, master: str | None, remote: str | None,
        spark_log: str | None, data_dir: str | None, serve: bool, bootstrap: str) -> None:
    """SQL over streams and tables declared on topics: push queries, persistent queries, Spark SQL.

    CREATE STREAM name (columns) WITH (topic='...', format='json'), then SELECT ... EMIT CHANGES (docs/sql.md).

    With neither -f nor -e, a prompt: end each statement with ; (Ctrl-C stops a push query, Ctrl-D leaves).
    A statement that cannot run is one line on stderr; -f and -e then stop with exit status 1."""
    from freshet.sql.errors import SqlError
    from freshet.sql.session import SqlSession

    if script_file and statements:
        click.echo("error: -f and -e exclude each other", err=True)
        sys.exit(1)
    script = None
    if script_file:
        with open(script_file, encoding="utf-8") as f:
            script = f.read()
    elif statements is not None:
        script = statements
    if script is not None:  # read whole first: a syntax error anywhere is one line, before Spark or the broker
        from freshet.sql.parser import parse

        try:
            parse(script)
        except SqlError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(1)
    if master or remote:  # checked as freshet run checks them: a wrong or unreachable one is one line, exit 1
        from .run_cmd import _engine

        _engine(master, remote, ())
    spark_log = spark_log or os.path.join(tempfile.gettempdir(), f"freshet-sql-{os.getuid()}.spark.log")
    session = SqlSession(bootstrap, master=master, remote=remote, data_dir=data_dir)
    code = 0
    try:
        with stderr_to(spark_log) as terminal:
            if serve:
                session.spark  # noqa: B018  (restored queries run in it)
                restarted = session.restore_queries()
                print(f"{len(restarted)} persistent quer{'y' if len(restarted) == 1 else 'ies'} running"
                      + (f": {', '.join(restarted)}" if restarted else ""), flush=True)
            if script is not None:
                code = _run_script(session, script, terminal, SqlError)
            elif not serve:
                _repl(session, terminal, SqlError)
            if serve and code == 0:
                code = _serve(session)
    finally:
        session.close()
    sys.exit(code)


def _serve(session) -> int:
    """Keep the process (and the persistent queries running in its Spark) alive until Ctrl-C or SIGTERM."""
    import threading

    from .common import stopping_on_signals

    stopped = threading.Event()
    stopping_on_signals(stopped.set)
    print("serving persistent queries; Ctrl-C stops them", flush=True)
    stopped.wait()
    from freshet.spark.session import stop_gracefully

    stop_gracefully(session.spark.streams.active)
    return 0


def _run_script(session, script: str, terminal, error_type) -> int:
    try:
        for result in session.execute(script):
            if _show(result) == "interrupted":
                return 130
    except error_type as e:
        print(f"error: {e}", file=terminal, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def _complete(buffer: str) -> bool:
    """Whether the typed text ends a statement: its last token (outside quotes and comments) is ``;``."""
    from freshet.sql.errors import SqlError
    from freshet.sql.parser import TokenType, tokenize

    if not buffer.strip():
        return False
    try:
        tokens = tokenize(buffer)
    except SqlError:
        return False  # an open quote: more to come
    return bool(tokens) and tokens[-1].token_type == TokenType.SEMICOLON


def _repl(session, terminal, error_type) -> None:
    try:
        import readline  # noqa: F401  (line editing and history for input())
    except ImportError:
        pass
    print("Freshet SQL: end statements with ;  SHOW STREAMS; lists streams, Ctrl-D leaves.", flush=True)
    buffer = ""
    while True:
        try:
            line = input(MORE if buffer else PROMPT)
        except EOFError:
            print(flush=True)
            return
        except KeyboardInterrupt:
            print(flush=True)
            buffer = ""
            continue
        if not buffer and line.strip().lower().rstrip(";") in ("exit", "quit"):
            return
        buffer += line + "\n"
        if not _complete(buffer):
            continue
        script, buffer = buffer, ""
        try:
            for result in session.execute(script):
                _show(result)
        except error_type as e:
            print(f"error: {e}", file=terminal, flush=True)
        except KeyboardInterrupt:
            print("\nInterrupted", flush=True)


def _text(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (datetime.date, decimal.Decimal)):
        return str(value)
    if isinstance(value, (list, dict)) or hasattr(value, "asDict"):
        return json.dumps(_plain(value), default=str)
    return str(value)


def _plain(value):
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _line(values: list[str], widths: list[int]) -> str:
    return "|" + "|".join(v.ljust(w) for v, w in zip(values, widths)) + "|"


def _show(result) -> str:
    """Print one statement's result; a push query's rows as they come, until its end or Ctrl-C."""
    from freshet.sql.results import Message, Push

    if isinstance(result, Message):
        print(result.text, flush=True)
        return "done"
    if isinstance(result, Push):
        widths = [max(len(c), 20) for c in result.columns]
        rule = "+" + "+".join("-" * w for w in widths) + "+"
        print(rule, _line(result.columns, widths), rule, sep="\n", flush=True)
        shown = 0
        try:
            for row in result.rows:
                print(_line([_text(v) for v in row], widths), flush=True)
                shown += 1
        except KeyboardInterrupt:
            result.stop()
            print("Query terminated", flush=True)
            return "interrupted"
        limit = result.info.get("limit")
        print("Limit reached" if limit is not None and shown >= limit else "Query terminated", flush=True)
        if result.info.get("late_rows"):
            print(f"{result.info['late_rows']} late rows dropped (behind the watermark)", flush=True)
        return "done"
    if result.columns == ["plan"]:
        for (plan,) in result.rows:
            print(plan, flush=True)
        return "done"
    cells = [[_text(v) for v in row] for row in result.rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(result.columns)]
    rule = "+" + "+".join("-" * w for w in widths) + "+"
    print(rule, _line(result.columns, widths), rule, *[_line(r, widths) for r in cells], rule, sep="\n", flush=True)
    print(f"({len(cells)} row{'s' if len(cells) != 1 else ''})", flush=True)
    return "done"
