"""``freshet es``: event sourcing from the command line.

    freshet es process enrollment                       # decide commands (runs until Ctrl-C)
    freshet es command enrollment course/c1 OpenCourse '{"title": "Streams", "capacity": 2}'
    freshet es command enrollment --file commands.jsonl  # many, over one connection
    freshet es commands enrollment                      # the commands log, each with its id and answer
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

from .common import bootstrap_option, one_line_errors, stopping_on_signals

# Start-up time matters here (a client command should take well under half a second): the event-sourcing
# library, the Kafka client and the examples are imported inside the commands, each taking what it uses.

app_argument = click.argument("app_name", metavar="APP")
name_option = click.option("--name", default=None, help="Run APP under this name (its own topics).")


def es_errors(fn):
    """The application's own refusals (unknown app, stream, command, bad JSON) as one line, exit 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if not _refusal(exc):
                raise
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            click.echo(f"error: {message}", err=True)
            sys.exit(1)

    return one_line_errors(wrapper)


def _refusal(exc: Exception) -> bool:
    """An error the application or the user's input caused (SchemaError is a ValueError); a failed rebuild
    (RebuildError: only when the projections were loaded, which the commands that rebuild do)."""
    projection = sys.modules.get("freshet.eventsourcing.projection")
    return isinstance(exc, (ValueError, KeyError, TimeoutError)) or (
        projection is not None and isinstance(exc, projection.RebuildError))


def _app(name: str, bootstrap: str, create: bool = False, rename: str | None = None,
         wait: bool = False, wait_s: float | None = None, projection: str | None = None):
    """The application, its topics checked: made when missing (``create``), waited for (``wait``, up to
    ``wait_s`` or until Ctrl-C), or else an error when absent. ``projection``: a name checked first."""
    from freshet.client import TopicAdmin
    from freshet.eventsourcing.examples import load_app

    app = load_app(name)
    if rename:
        app = app.named(rename)
    if projection is not None:
        _projection(app, projection)
    existing = TopicAdmin(bootstrap).list_topics()  # "cannot reach a broker" before anything waits
    maker = f"`freshet es process {name}{f' --name {rename}' if rename else ''}` makes them"
    if create:
        if any(topic not in existing for topic, _, _ in app.topic_specs()):
            app.create_topics(bootstrap)
    elif wait:
        if app.topics_not_ready(bootstrap):
            click.echo(f"waiting for {app.name}'s topics at {bootstrap} ({maker})"
                       f"{'' if wait_s is None else f' for up to {wait_s:g} s'}; Ctrl-C stops", err=True)
            app.wait_for_topics(bootstrap, wait_s)
    elif app.events_topic not in existing:
        raise ValueError(f"{app.name} has no topics at {bootstrap} yet ({maker})")
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
@click.option("--instance-id", default=None, metavar="ID",
              help="Join the group as a static member (Kafka's group.instance.id): restarted with the same ID, "
                   "the processor takes its place at once instead of waiting out the dead one's 6 s session. "
                   "Two processes with the same ID fence each other: give each running copy its own.")
@click.option("--idle-exit", type=float, default=None, help="Stop after this many seconds without commands.")
@bootstrap_option
@es_errors
def process(app_name: str, name: str | None, transactional_id: str | None, instance_id: str | None,
            idle_exit: float | None, bootstrap: str) -> None:
    """Decide APP's commands: events, answers and offsets in one transaction per batch."""
    from freshet.eventsourcing.processor import CommandProcessor, check_instance_id

    check_instance_id(instance_id)  # before any topic is made
    app = _app(app_name, bootstrap, create=True, rename=name)
    processor = CommandProcessor(app, bootstrap, transactional_id, instance_id=instance_id)
    click.echo(f"deciding {app.commands_topic} ({app.partitions} partitions); Ctrl-C stops", err=True)
    stopping_on_signals(processor.stop)
    stats = processor.run(idle_timeout_s=idle_exit)
    click.echo(f"{stats.commands} commands: {stats.accepted} accepted, {stats.rejected} refused; "
               f"{stats.events} events in {stats.transactions} transactions", err=True)


@es.command()
@app_argument
@name_option
@click.argument("stream", required=False)
@click.argument("command_type", metavar="[COMMAND]", required=False)
@click.argument("fields", required=False)
@click.option("--file", "path", default=None, metavar="PATH",
              help='Send every command of a JSON-lines file (- for standard input), one object a line: '
                   '{"stream": "course/c1", "command": "Enroll", "fields": {...}, "expected_version": 3} '
                   '(fields and expected_version optional). All are checked before any is sent.')
@click.option("--expected-version", type=int, default=None, help="Refused (conflict) unless the aggregate is "
              "at this version.")
@click.option("--timeout", type=float, default=30.0, show_default=True,
              help="Seconds to wait for the answers (all of them, with --file).")
@bootstrap_option
@es_errors
def command(app_name: str, name: str | None, stream: str | None, command_type: str | None, fields: str | None,
            path: str | None, expected_version: int | None, timeout: float, bootstrap: str) -> None:
    """Send COMMAND with FIELDS (a JSON object) to aggregate STREAM (type/id) and print the answer, or with
    --file send many over one connection and print one answer a line, in the file's order. Exit 1 when a
    command is refused."""
    if path is not None:
        if stream is not None or expected_version is not None:
            raise ValueError("--file takes every command from the file: give no STREAM, COMMAND, FIELDS or "
                             "--expected-version with it")
        numbered = _read_commands(path)
    else:
        if stream is None or command_type is None:
            raise ValueError("give STREAM and COMMAND (and FIELDS), or --file PATH")
        numbered = [(0, (stream, command_type, _fields(fields or "{}", "FIELDS"), expected_version))]
    from freshet.eventsourcing.commands import CommandClient

    app = _app(app_name, bootstrap, create=True, rename=name)
    with CommandClient(app, bootstrap) as client:
        ids = client.send_many([c for _, c in numbered])
        answers = client.answers(ids, timeout)
    if path is None:
        answer = answers[ids[0]]
        if answer.accepted:
            click.echo(_answer_line(answer))
            return
        click.echo(_answer_line(answer), err=True)
        sys.exit(1)
    refused = 0
    for (number, _), command_id in zip(numbered, ids):
        answer = answers[command_id]
        refused += not answer.accepted
        click.echo(f"line {number}: {_answer_line(answer)}")
    if refused:
        click.echo(f"{refused} of {len(ids)} commands refused", err=True)
        sys.exit(1)


def _answer_line(answer) -> str:
    where = f" (events up to offset {answer.offset} of partition {answer.partition})" if answer.offset >= 0 else ""
    if answer.accepted:
        return f"accepted: {answer.stream} is at version {answer.version}{where}; command {answer.id}"
    return f"{answer.status}: {answer.reason}{where}; command {answer.id}"


def _fields(text: str, what: str) -> dict:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{what} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be a JSON object")
    return data


COMMAND_LINE_KEYS = ("stream", "command", "fields", "expected_version")


def _read_commands(path: str) -> list[tuple[int, tuple[str, str, dict, int | None]]]:
    """The commands of a JSON-lines file with their line numbers (blank lines skipped); a bad line is an error
    naming it."""
    if path == "-":
        lines = sys.stdin.read().splitlines()
    else:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    commands = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        doc = _fields(line, f"{path} line {number}")
        unknown = sorted(set(doc) - set(COMMAND_LINE_KEYS))
        if unknown:
            raise ValueError(f"{path} line {number}: unknown key {', '.join(map(repr, unknown))} (a line takes: "
                             f"{', '.join(COMMAND_LINE_KEYS)})")
        stream, type_name, data = doc.get("stream"), doc.get("command"), doc.get("fields", {})
        expected = doc.get("expected_version")
        if not isinstance(stream, str) or not isinstance(type_name, str):
            raise ValueError(f"{path} line {number}: \"stream\" and \"command\" must be strings")
        if not isinstance(data, dict):
            raise ValueError(f"{path} line {number}: \"fields\" must be a JSON object")
        if expected is not None and (not isinstance(expected, int) or isinstance(expected, bool)):
            raise ValueError(f"{path} line {number}: \"expected_version\" must be an integer")
        commands.append((number, (stream, type_name, data, expected)))
    if not commands:
        raise ValueError(f"{path} holds no commands")
    return commands


@es.command()
@app_argument
@name_option
@bootstrap_option
@es_errors
def commands(app_name: str, name: str | None, bootstrap: str) -> None:
    """Every command in the log with its id and answer; personal fields show as <forgotten> once their
    subject is forgotten."""
    from freshet.client.reading import read_to_end, reader
    from freshet.eventsourcing.keys import SubjectKeys

    app = _app(app_name, bootstrap, rename=name)
    consumer = reader(bootstrap)
    answers: dict[str, dict] = {}
    sent: list[tuple[int, int, str, dict]] = []
    keys = SubjectKeys(bootstrap, app.keys_topic)
    try:
        read_to_end(consumer, [(app.replies_topic, p, -2) for p in range(app.partitions)],
                    lambda m: answers.update((a["id"], a) for a in json.loads(m.value())["answers"]))
        read_to_end(consumer, [(app.commands_topic, p, -2) for p in range(app.partitions)],
                    lambda m: sent.append((m.timestamp()[1], m.offset(), m.key().decode(), json.loads(m.value()))))
        keys.load()  # after the commands: every key they were sealed with is there, or forgotten
        rows = []
        for ts, _, stream, doc in sorted(sent, key=lambda s: s[:2]):
            answer = answers.get(doc.get("id"), {})
            status = answer.get("status", "pending")
            what = doc.get("type") or f"append {len(doc.get('append', []))} events"
            detail = answer.get("reason") or (f"version {answer['version']}" if "version" in answer else "")
            data = app.codec.open_command(doc["type"], doc.get("data") or {}, keys) if doc.get("type") else {}
            rows.append(f"{_time(ts)}\t{doc.get('id')}\t{stream}\t{what}\t{json.dumps(data, default=str)}\t"
                        f"{status}\t{detail}")
    finally:
        consumer.close()
        keys.close()
    for row in rows:
        click.echo(row)


@es.command()
@app_argument
@name_option
@click.option("--stream", default=None, help="One aggregate (type/id); default: every event.")
@bootstrap_option
@es_errors
def events(app_name: str, name: str | None, stream: str | None, bootstrap: str) -> None:
    """The events, upcast to today's schemas; forgotten personal data shows as <forgotten>."""
    from freshet.eventsourcing.store import EventStore

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
    """An aggregate's state, replayed from its events (now, at a version, or at a time). A version past the
    aggregate's last is an error."""
    from freshet.eventsourcing.store import EventStore

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
        raise ValueError(f"{stream} has no events" + (" by then" if version is not None or at else ""))
    click.echo(json.dumps(agg.state(), indent=2, default=str))


@es.command()
@app_argument
@name_option
@click.argument("projection_name", metavar="PROJECTION")
@click.option("--db", "database", required=True, help="sqlite:PATH or postgresql://...")
@click.option("--until-caught-up", is_flag=True, help="Stop at the end of the log instead of following it.")
@click.option("--wait", "wait_s", type=float, default=None, metavar="SECONDS",
              help="How long to wait for APP's topics when they do not exist yet (default: until Ctrl-C).")
@bootstrap_option
@es_errors
def project(app_name: str, name: str | None, projection_name: str, database: str, until_caught_up: bool,
            wait_s: float | None, bootstrap: str) -> None:
    """Keep PROJECTION up to date in the database (exactly once; positions stored with the rows). Started
    before APP's topics exist, it waits for them."""
    from freshet.eventsourcing.projection import ProjectionRunner

    app = _app(app_name, bootstrap, rename=name, wait=True, wait_s=wait_s, projection=projection_name)
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
    from freshet.eventsourcing.projection import rebuild

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
    """Delete SUBJECT's keys: their personal data (in events and in commands) becomes unreadable in every
    replay and copy of the log."""
    from freshet.eventsourcing.keys import SubjectKeys

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


