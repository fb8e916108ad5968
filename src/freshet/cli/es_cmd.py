"""``freshet es``: event sourcing from the command line.

    freshet es process enrollment                       # decide commands (runs until Ctrl-C)
    freshet es command enrollment course/c1 OpenCourse '{"title": "Streams", "capacity": 2}'
    freshet es commands enrollment                      # the commands log, each with its answer
    freshet es events enrollment --stream course/c1
    freshet es state enrollment course/c1 --version 3
    freshet es project enrollment roster --db sqlite:roster.db
    freshet es rebuild enrollment waiting_list --db sqlite:roster.db
    freshet es forget enrollment s42
"""

from __future__ import annotations

import datetime
import functools
import json
import sys

import click

from freshet.client import TopicAdmin
from freshet.client.reading import read_to_end, reader
from freshet.eventsourcing import (
    CommandClient,
    CommandProcessor,
    EventStore,
    ProjectionRunner,
    RebuildError,
    SchemaError,
    SubjectKeys,
    rebuild,
)
from freshet.eventsourcing.examples import load_app

from .common import bootstrap_option, one_line_errors, stopping_on_signals

app_argument = click.argument("app_name", metavar="APP")
name_option = click.option("--name", default=None, help="Run APP under this name (its own topics).")


def es_errors(fn):
    """The application's own refusals (unknown app, stream, command, bad JSON) as one line, exit 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ValueError, KeyError, SchemaError, TimeoutError, RebuildError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            click.echo(f"error: {message}", err=True)
            sys.exit(1)

    return one_line_errors(wrapper)


def _app(name: str, bootstrap: str, create: bool = False, rename: str | None = None):
    app = load_app(name)
    if rename:
        app = app.named(rename)
    existing = TopicAdmin(bootstrap).list_topics()  # "cannot reach a broker" before anything waits
    if create:
        app.create_topics(bootstrap)
    elif app.events_topic not in existing:
        raise ValueError(f"{app.name} has no topics at {bootstrap} yet (`freshet es process {name}` makes them)")
    return app


def _projection(app, name: str):
    if name not in app.projections:
        raise ValueError(f"{app.name} has no projection {name!r} (it has: {', '.join(sorted(app.projections))})")
    return app.projections[name]


@click.group()
def es() -> None:
    """Event sourcing: commands, events, state, projections, forgetting. APP is one of the examples
    (enrollment, ledger) or module:attribute naming your own Application."""


@es.command()
@app_argument
@name_option
@click.option("--transactional-id", default=None,
              help="Default: APP.processor, so a restarted processor fences the one before at once. To run "
                   "several side by side (they share the partitions as a consumer group), give each its own id.")
@click.option("--idle-exit", type=float, default=None, help="Stop after this many seconds without commands.")
@bootstrap_option
@es_errors
def process(app_name: str, name: str | None, transactional_id: str | None, idle_exit: float | None, bootstrap: str) -> None:
    """Decide APP's commands: events, answers and offsets in one transaction per batch."""
    app = _app(app_name, bootstrap, create=True, rename=name)
    processor = CommandProcessor(app, bootstrap, transactional_id)
    click.echo(f"deciding {app.commands_topic} ({app.partitions} partitions); Ctrl-C stops", err=True)
    stopping_on_signals(processor.stop)
    stats = processor.run(idle_timeout_s=idle_exit)
    click.echo(f"{stats.commands} commands: {stats.accepted} accepted, {stats.rejected} refused; "
               f"{stats.events} events in {stats.transactions} transactions", err=True)


@es.command()
@app_argument
@name_option
@click.argument("stream")
@click.argument("command_type", metavar="COMMAND")
@click.argument("fields", default="{}")
@click.option("--expected-version", type=int, default=None, help="Refused (conflict) unless the aggregate is "
              "at this version.")
@click.option("--timeout", type=float, default=30.0, show_default=True)
@bootstrap_option
@es_errors
def command(app_name: str, name: str | None, stream: str, command_type: str, fields: str, expected_version: int | None,
            timeout: float, bootstrap: str) -> None:
    """Send COMMAND with FIELDS (a JSON object) to aggregate STREAM (type/id) and print the answer.
    Exit 1 when it is refused."""
    app = _app(app_name, bootstrap, create=True, rename=name)
    try:
        data = json.loads(fields)
    except ValueError as exc:
        raise ValueError(f"FIELDS is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("FIELDS must be a JSON object")
    with CommandClient(app, bootstrap) as client:
        answer = client.answer(client.send_raw(stream, command_type, data, expected_version), timeout)
    where = f" (events up to offset {answer.offset} of partition {answer.partition})" if answer.offset >= 0 else ""
    if answer.accepted:
        click.echo(f"accepted: {stream} is at version {answer.version}{where}")
        return
    click.echo(f"{answer.status}: {answer.reason}{where}", err=True)
    sys.exit(1)


@es.command()
@app_argument
@name_option
@bootstrap_option
@es_errors
def commands(app_name: str, name: str | None, bootstrap: str) -> None:
    """Every command in the log with its answer."""
    app = _app(app_name, bootstrap, rename=name)
    consumer = reader(bootstrap)
    answers: dict[str, dict] = {}
    sent: list[tuple[int, int, str, dict]] = []
    try:
        read_to_end(consumer, [(app.replies_topic, p, -2) for p in range(app.partitions)],
                    lambda m: answers.update((a["id"], a) for a in json.loads(m.value())["answers"]))
        read_to_end(consumer, [(app.commands_topic, p, -2) for p in range(app.partitions)],
                    lambda m: sent.append((m.timestamp()[1], m.offset(), m.key().decode(), json.loads(m.value()))))
    finally:
        consumer.close()
    for ts, _, stream, doc in sorted(sent, key=lambda s: s[:2]):
        answer = answers.get(doc.get("id"), {})
        status = answer.get("status", "pending")
        what = doc.get("type") or f"append {len(doc.get('append', []))} events"
        detail = answer.get("reason") or (f"version {answer['version']}" if "version" in answer else "")
        click.echo(f"{_time(ts)}\t{stream}\t{what}\t{json.dumps(doc.get('data', {}))}\t{status}\t{detail}")


@es.command()
@app_argument
@name_option
@click.option("--stream", default=None, help="One aggregate (type/id); default: every event.")
@bootstrap_option
@es_errors
def events(app_name: str, name: str | None, stream: str | None, bootstrap: str) -> None:
    """The events, upcast to today's schemas; forgotten personal data shows as <forgotten>."""
    app = _app(app_name, bootstrap, rename=name)
    with EventStore(app, bootstrap) as store:
        for r in store.events(stream):
            fields = json.dumps(vars(r.event), default=str)
            click.echo(f"{_time(r.timestamp_ms)}\t{r.stream}\tv{r.version}\t{type(r.event).__name__}\t{fields}")


@es.command()
@app_argument
@name_option
@click.argument("stream")
@click.option("--version", type=int, default=None, help="As of this version (its first N events).")
@click.option("--at", "at", default=None, help="As of this time (ISO 8601, UTC unless it says otherwise).")
@bootstrap_option
@es_errors
def state(app_name: str, name: str | None, stream: str, version: int | None, at: str | None, bootstrap: str) -> None:
    """An aggregate's state, replayed from its events (now, at a version, or at a time)."""
    app = _app(app_name, bootstrap, rename=name)
    at_ms = None
    if at is not None:
        when = datetime.datetime.fromisoformat(at)
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        at_ms = int(when.timestamp() * 1000)
    with EventStore(app, bootstrap) as store:
        agg = store.state(stream, version, at_ms)
    if agg.version == 0:
        raise ValueError(f"{stream} has no events" + (" by then" if version or at else ""))
    click.echo(json.dumps(agg.state(), indent=2, default=str))


@es.command()
@app_argument
@name_option
@click.argument("projection_name", metavar="PROJECTION")
@click.option("--db", "database", required=True, help="sqlite:PATH or postgresql://...")
@click.option("--until-caught-up", is_flag=True, help="Stop at the end of the log instead of following it.")
@bootstrap_option
@es_errors
def project(app_name: str, name: str | None, projection_name: str, database: str, until_caught_up: bool, bootstrap: str) -> None:
    """Keep PROJECTION up to date in the database (exactly once; positions stored with the rows)."""
    app = _app(app_name, bootstrap, rename=name)
    runner = ProjectionRunner(app, _projection(app, projection_name), database, bootstrap)
    stopping_on_signals(runner.stop)
    try:
        applied = runner.run(until_caught_up=until_caught_up)
    finally:
        runner.close()
    click.echo(f"{projection_name}: {applied} events applied", err=True)


@es.command("rebuild")
@app_argument
@name_option
@click.argument("projection_name", metavar="PROJECTION")
@click.option("--db", "database", required=True, help="sqlite:PATH or postgresql://...")
@click.option("--workers", type=int, default=None,
              help="Processes to split the events partitions over (default: one per core for a projection "
                   "keyed by aggregate, else 1).")
@bootstrap_option
@es_errors
def rebuild_(app_name: str, name: str | None, projection_name: str, database: str, workers: int | None,
             bootstrap: str) -> None:
    """Replay every event into new tables, then swap them in (readers see the old ones until then)."""
    app = _app(app_name, bootstrap, rename=name)
    generation, applied = rebuild(app, _projection(app, projection_name), database, bootstrap, workers=workers)
    click.echo(f"{projection_name}: generation {generation} built from {applied} events and swapped in")


@es.command()
@app_argument
@name_option
@click.argument("subject")
@bootstrap_option
@es_errors
def forget(app_name: str, name: str | None, subject: str, bootstrap: str) -> None:
    """Delete SUBJECT's keys: their personal data becomes unreadable in every replay and copy of the log."""
    app = _app(app_name, bootstrap, rename=name)
    keys = SubjectKeys(bootstrap, app.keys_topic).load()
    try:
        count = keys.forget(subject)
    finally:
        keys.close()
    if count == 0:
        raise ValueError(f"{app.name} holds no key for {subject!r} (never seen, or already forgotten)")
    click.echo(f"forgot {subject}: {count} key(s) tombstoned; compaction removes them from the log")


def _time(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


