"""``freshet rules`` and ``freshet watch``: the CEP rules and the stored search queries a running
``freshet run cep`` / ``freshet run watch`` matches, kept in compacted topics (changes take effect in
running queries within a second or so).

    freshet rules add my.rules                # one or more rules from a file ('-': stdin)
    freshet rules add --set intrusion         # a shipped rule set: intrusion, fraud, telco
    freshet rules list | show NAME | remove NAME
    freshet rules try my.rules events.jsonl   # match locally, no Spark: what would alert
    freshet watch add "city = Delft AND price < 400000" --id anna
    freshet watch add --file queries.txt      # one per line: QUERY or ID<tab>QUERY; all checked, then stored
    freshet watch list | remove ID
"""

from __future__ import annotations

import hashlib
import json
import sys

import click

from freshet.client import ClientError
from freshet.client.stored import RULES_TOPIC, WATCHES_TOPIC, StoredDefinitions

from .common import bootstrap_option, one_line_errors


def _rule_texts(source: str | None, ruleset: str | None) -> list[str]:
    from freshet.cep.rulesets import names, split_rules, text

    if (source is None) == (ruleset is None):
        raise ClientError("give a rules file (or - for stdin) or --set NAME")
    if ruleset is not None:
        if ruleset not in names():
            raise ClientError(f"no rule set {ruleset!r}; there are {', '.join(names())}")
        content = text(ruleset)
    elif source == "-":
        content = sys.stdin.read()
    else:
        try:
            with open(source, encoding="utf-8") as f:
                content = f.read()
        except OSError as exc:
            raise ClientError(f"cannot read {source}: {exc.strerror}") from None
    texts = split_rules(content)
    if not texts:
        raise ClientError(f"no rule in {source or ruleset} (each starts with RULE name)")
    return texts


def _parsed(texts: list[str]):
    from freshet.cep.rules import parse_rule

    rules = []
    for text in texts:
        try:
            rules.append(parse_rule(text))
        except ValueError as exc:
            first = text.split("\n", 1)[0]
            raise ClientError(f"{first}: {exc}") from None
    names = [r.name for r in rules]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ClientError(f"rule {twice[0]} is given twice")
    return rules


@click.group()
def rules() -> None:
    """CEP rules (MATCH_RECOGNIZE with WITHIN and absence) that `freshet run cep` matches."""


@rules.command("add")
@click.argument("source", required=False)
@click.option("--set", "ruleset", default=None, help="A shipped rule set: intrusion, fraud, telco.")
@bootstrap_option
@one_line_errors
def rules_add(source: str | None, ruleset: str | None, bootstrap: str) -> None:
    """Store the rules of SOURCE (a file, - for stdin) or of a shipped --set; a rule of the same name is
    replaced. Every rule is checked first: if one is wrong, none is stored."""
    parsed = _parsed(_rule_texts(source, ruleset))
    StoredDefinitions(bootstrap, RULES_TOPIC).put_many([(rule.name, rule.text) for rule in parsed])
    for rule in parsed:
        click.echo(f"added {rule.name}: {rule.describe()}")


@rules.command("list")
@bootstrap_option
@one_line_errors
def rules_list(bootstrap: str) -> None:
    """Every stored rule: name, what it reads, its pattern."""
    from freshet.cep.rules import parse_rule

    stored = StoredDefinitions(bootstrap, RULES_TOPIC).refresh()
    if not stored:
        click.echo("no rules (freshet rules add FILE, or --set intrusion)")
    for name, definition in sorted(stored.items()):
        try:
            rule = parse_rule(definition["text"])
            click.echo(f"{name:28} {rule.topic or '*':20} {rule.describe()}")
        except ValueError as exc:
            click.echo(f"{name:28} {'?':20} not valid: {exc}")


@rules.command("show")
@click.argument("name")
@bootstrap_option
@one_line_errors
def rules_show(name: str, bootstrap: str) -> None:
    """A stored rule's text."""
    stored = StoredDefinitions(bootstrap, RULES_TOPIC).refresh()
    if name not in stored:
        raise ClientError(f"no rule {name!r}")
    click.echo(stored[name]["text"])


@rules.command("remove")
@click.argument("name")
@bootstrap_option
@one_line_errors
def rules_remove(name: str, bootstrap: str) -> None:
    """Remove a stored rule; running queries drop its partial matches."""
    StoredDefinitions(bootstrap, RULES_TOPIC).remove(name)
    click.echo(f"removed {name}")


@rules.command("try")
@click.argument("source")
@click.argument("events", type=click.Path(dir_okay=False))
@one_line_errors
def rules_try(source: str, events: str) -> None:
    """Match the rules of SOURCE against EVENTS (JSON lines) here, without Spark or a broker: one alert
    record per line (the record `freshet run cep` writes to its topic), in each partition's event-time order.
    EVENTS is taken as finished: what is still pending at its end (a NOT FOLLOWED BY, a pattern that could
    grow) is decided as if every time limit had run out."""
    from freshet.cep.matcher import match_events

    parsed = _parsed(_rule_texts(source, None))
    loaded = []
    try:
        with open(events, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if line.strip():
                    try:
                        loaded.append(json.loads(line))
                    except ValueError:
                        raise ClientError(f"{events}:{number}: not JSON") from None
    except OSError as exc:
        raise ClientError(f"cannot read {events}: {exc.strerror}") from None
    found = 0
    for rule in parsed:
        for match in match_events(rule, [e for e in loaded if isinstance(e, dict)]):
            click.echo(json.dumps(match.alert(), ensure_ascii=False, separators=(",", ":")))
            found += 1
    click.echo(f"{found} matches of {len(parsed)} rules in {len(loaded)} events", err=True)


@click.group()
def watch() -> None:
    """Stored search queries that `freshet run watch` matches against every new event."""


@watch.command("add")
@click.argument("query", required=False)
@click.option("--id", "query_id", default=None, help="The query's id (default: from its text).")
@click.option("--file", "path", default=None,
              help="Store every query of this file ('-': stdin), one per line: QUERY, or ID<tab>QUERY; blank lines "
                   "and lines starting with # are skipped. Every line is checked first: if one is wrong, none "
                   "is stored.")
@bootstrap_option
@one_line_errors
def watch_add(query: str | None, query_id: str | None, path: str | None, bootstrap: str) -> None:
    """Store QUERY: words, "phrases", field:word, field = value, <, >, IN (...), AND, OR, NOT, ( ).
    With --file, many at once, written together."""
    if path is None and query is None:
        raise ClientError('give a QUERY ("city = Delft AND price < 400000") or --file FILE')
    if path is not None and (query is not None or query_id is not None):
        raise ClientError("--file takes the queries and their ids from the file: no QUERY or --id beside it")
    if path is None:
        queries = [_checked_query(query, query_id, "--id ")]
    else:
        queries = _query_file(path)
    StoredDefinitions(bootstrap, WATCHES_TOPIC).put_many(queries)
    for qid, text in queries:
        click.echo(f"added {qid}: {text}")


def _checked_query(query: str, query_id: str | None, id_label: str = "id ") -> tuple[str, str]:
    """(id, query) once the query parses and the id (default: from the query's text) is a valid one."""
    from freshet.cep.search import parse_query

    try:
        parse_query(query)
    except ValueError as exc:
        raise ClientError(f"query: {exc}") from None
    query_id = query_id or "q-" + hashlib.sha1(query.encode()).hexdigest()[:8]
    if not query_id.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ClientError(f"{id_label}{query_id!r}: letters, digits, '-', '_' and '.' only")
    return query_id, query


def _query_file(path: str) -> list[tuple[str, str]]:
    """Every (id, query) of the file, each line checked; ClientError naming the first bad line."""
    try:
        if path == "-":
            lines = sys.stdin.read().splitlines()
        else:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ClientError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    name = "stdin" if path == "-" else path
    queries: list[tuple[str, str]] = []
    line_of: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        query_id, tab, text = line.partition("\t")
        if not tab:
            query_id, text = None, line
        try:
            query_id, text = _checked_query(text.strip(), query_id.strip() if tab else None)
        except ClientError as exc:
            raise ClientError(f"{name}:{number}: {exc}") from None
        if query_id in line_of:
            raise ClientError(f"{name}:{number}: id {query_id} is on line {line_of[query_id]} too")
        line_of[query_id] = number
        queries.append((query_id, text))
    if not queries:
        raise ClientError(f"no query in {name} (one per line: QUERY, or ID<tab>QUERY)")
    return queries


@watch.command("list")
@bootstrap_option
@one_line_errors
def watch_list(bootstrap: str) -> None:
    """Every stored query."""
    stored = StoredDefinitions(bootstrap, WATCHES_TOPIC).refresh()
    if not stored:
        click.echo('no stored queries (freshet watch add "QUERY")')
    for query_id, definition in sorted(stored.items()):
        click.echo(f"{query_id:20} {definition['text']}")


@watch.command("remove")
@click.argument("query_id")
@bootstrap_option
@one_line_errors
def watch_remove(query_id: str, bootstrap: str) -> None:
    """Remove a stored query."""
    StoredDefinitions(bootstrap, WATCHES_TOPIC).remove(query_id)
    click.echo(f"removed {query_id}")
