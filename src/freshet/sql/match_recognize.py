"""``SELECT ... FROM stream MATCH_RECOGNIZE (...)``: SQL's row pattern recognition, compiled to the CEP engine
``freshet rules`` runs (``freshet.cep``, on Spark through ``freshet.pipelines.cep.match_rules``): one engine,
two front ends.

The clause's body is a rule's body as docs/cep.md has it (PARTITION BY, ORDER BY, MEASURES, ONE ROW PER MATCH,
PATTERN, DEFINE, AFTER MATCH SKIP, and Freshet's WITHIN, NOT FOLLOWED BY, EMIT TIMEOUTS; ``WITHIN INTERVAL '2'
MINUTE`` as Flink SQL writes it). A rule's pre-filter (its WHERE) is SQL's subquery:
``FROM (SELECT * FROM s WHERE cond) MATCH_RECOGNIZE (...)``. The engine reads each record's fields by name, as
the rules do: a JSON stream's records as they are; a CSV, Avro or raw stream's (or one with computed columns) as
the JSON object of its columns. The watermark is the stream's (its ``watermark`` option, else the
pipelines' default).

What the clause gives, one row per match: the PARTITION BY columns, then the MEASURES, then ``match_start`` and
``match_end`` (a measure of the same name as a partition column takes its place); the rest of the SELECT (its
columns, WHERE, ...) is Spark SQL over these rows.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from . import parser as p
from .errors import SqlError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class Recognize:
    """A MATCH_RECOGNIZE clause cut out of its query: ``sql[start:end]`` (the FROM item and the clause, with its
    alias) is what the match rows replace."""

    stream: str
    where: str | None
    body: str
    alias: str | None
    start: int
    end: int


def _matching(tokens: list, i: int, step: int) -> int:
    """The index of the parenthesis matching ``tokens[i]``: the closing one (``step`` 1) or the opening one (-1)."""
    opens, closes = ((p.TokenType.L_PAREN, p.TokenType.R_PAREN) if step == 1
                     else (p.TokenType.R_PAREN, p.TokenType.L_PAREN))
    depth = 0
    for j in range(i, len(tokens) if step == 1 else -1, step):
        kind = tokens[j].token_type
        depth += (kind == opens) - (kind == closes)
        if depth == 0:
            return j
    raise SqlError("MATCH_RECOGNIZE ( ... ): a parenthesis is not closed" if step == 1
                   else "a parenthesis before MATCH_RECOGNIZE is not opened")


def split(sql: str) -> Recognize:
    """The one MATCH_RECOGNIZE clause of ``sql``; SqlError when it is not where SQL puts it."""
    tokens = p.tokenize(sql)
    at = [i for i, t in enumerate(tokens) if t.text.upper() == "MATCH_RECOGNIZE"
          and t.token_type not in (p.TokenType.STRING, p.TokenType.IDENTIFIER)]
    if len(at) != 1:
        raise SqlError("a query takes one MATCH_RECOGNIZE clause" if at else "no MATCH_RECOGNIZE clause")
    i = at[0]
    usage = "MATCH_RECOGNIZE follows a stream: FROM stream MATCH_RECOGNIZE (...), or " \
            "FROM (SELECT * FROM stream WHERE condition) MATCH_RECOGNIZE (...)"
    if i + 1 >= len(tokens) or tokens[i + 1].token_type != p.TokenType.L_PAREN:
        raise SqlError("MATCH_RECOGNIZE takes its clauses in parentheses: MATCH_RECOGNIZE (PARTITION BY ... "
                       "PATTERN (...) DEFINE ...)")
    close = _matching(tokens, i + 1, 1)
    body = sql[tokens[i + 1].end + 1:tokens[close].start]
    end = tokens[close].end + 1
    alias = None
    k = close + 1
    if k < len(tokens) and tokens[k].token_type == p.TokenType.ALIAS:
        k += 1
    if k < len(tokens) and tokens[k].token_type in (p.TokenType.VAR, p.TokenType.IDENTIFIER) \
            and _NAME.fullmatch(tokens[k].text):
        alias, end = tokens[k].text, tokens[k].end + 1
    if i == 0:
        raise SqlError(usage)
    where = None
    before = tokens[i - 1]
    if before.token_type == p.TokenType.R_PAREN:  # FROM (SELECT * FROM s [WHERE ...]) MATCH_RECOGNIZE
        opening = _matching(tokens, i - 1, -1)
        inner = tokens[opening + 1:i - 1]
        if (len(inner) < 4 or inner[0].token_type != p.TokenType.SELECT or inner[1].text != "*"
                or inner[2].token_type != p.TokenType.FROM):
            raise SqlError(usage)
        stream = inner[3].text
        if len(inner) > 4:
            if inner[4].token_type != p.TokenType.WHERE or len(inner) == 5:
                raise SqlError(usage)
            where = sql[inner[5].start:inner[-1].end + 1]
        first = opening
    elif before.token_type in (p.TokenType.VAR, p.TokenType.IDENTIFIER):
        stream, first = before.text, i - 1
    else:
        raise SqlError(usage)
    if first == 0 or tokens[first - 1].token_type not in (p.TokenType.FROM, p.TokenType.JOIN, p.TokenType.COMMA):
        raise SqlError(usage)
    return Recognize(stream, where, body, alias, tokens[first].start, end)


def _rule_dialect(text: str) -> str:
    """Spark SQL's `quoted` names as the rules' "quoted" names."""
    return re.sub(r"`((?:[^`]|``)+)`", lambda m: '"' + m.group(1).replace("``", "`").replace('"', '""') + '"', text)


def rule_text(rec: Recognize, name: str) -> str:
    """The clause as a rule of ``freshet rules`` (the same grammar, docs/cep.md)."""
    lines = [f"RULE {name}"]
    if rec.where:
        lines.append("WHERE " + _rule_dialect(rec.where))
    body = rec.body.strip()
    if re.search(r"(?is)\bORDER\s+BY\s+[`\w.]+\s+DESC\b", body):
        raise SqlError("MATCH_RECOGNIZE: ORDER BY takes the event time, ascending")
    body = re.sub(r"(?is)(\bORDER\s+BY\s+[`\w.]+)\s+ASC\b", r"\1", body)
    lines.append(_rule_dialect(body))
    return "\n".join(lines)


def _top_level_items(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [i.strip() for i in items if i.strip()]


def _measure_type(expression: str, types: dict[str, str]) -> str | None:
    """The Spark type of a measure's value, where its expression says it (None: leave it a VARIANT)."""
    e = " ".join(expression.split())
    if re.match(r"(?i)^count\s*\(", e):
        return "bigint"
    if re.match(r"(?i)^(sum|avg)\s*\(", e):
        return "double"
    found = re.fullmatch(r"(?i)(?:(?:first|last|min|max)\s*\(\s*)?(?:[A-Za-z_]\w*\.)?[`\"]?(\w+)[`\"]?\s*\)?", e)
    if found:
        return types.get(found.group(1).lower())
    return None


def _value(json_column: str, field: str, type_: str | None) -> str:
    """A field of a VARIANT column as a Spark SQL expression of ``type_`` (epoch milliseconds or ISO text for
    timestamps, as the rules read event time)."""
    path = "'$[\"" + field.replace("'", "\\'").replace('"', '\\"') + "\"]'"
    if type_ is None:
        return f"variant_get({json_column}, {path})"
    if type_.lower().startswith("timestamp"):
        number = f"try_variant_get({json_column}, {path}, 'bigint')"
        return (f"CASE WHEN {number} IS NOT NULL THEN timestamp_millis({number}) "
                f"ELSE try_variant_get({json_column}, {path}, 'timestamp') END")
    return f"try_variant_get({json_column}, {path}, '{type_}')"


def matches(session, rec: Recognize, name: str):
    """The match rows of ``rec`` over its stream: a DataFrame (streaming, as the stream is)."""
    from freshet.cep.expressions import RuleSyntaxError
    from freshet.cep.rules import parse_rule
    from freshet.pipelines.cep import FixedRules, match_rules
    from freshet.pipelines.runner import PipelineSpec, source
    from freshet.pipelines.stateful import DEFAULT_LATENESS

    defn = session.catalog.get(rec.stream)
    if defn is None:
        raise SqlError(f"MATCH_RECOGNIZE over {rec.stream}: no such stream (SHOW STREAMS lists them)")
    if defn.kind != "stream":
        raise SqlError(f"MATCH_RECOGNIZE reads a stream; {defn.name} is a table")
    text = rule_text(rec, name)
    try:
        rule = parse_rule(text)
    except RuleSyntaxError as e:
        raise SqlError(f"MATCH_RECOGNIZE: {e}") from None
    spec = PipelineSpec("sql", defn.topic, "console", session.bootstrap, "", starting_offsets=session.offset_reset)
    raw = source(session.spark, spec)
    if defn.format == "json" and all(c.expr is None for c in defn.columns):
        types = {c.name.lower(): c.type for c in defn.columns}
    else:  # the engine reads JSON objects: each row of the declared (and computed) columns as one
        raw, types = _as_json(raw, defn)
    for path in rule.partition_by + (rule.order_by,):
        if path[0].lower() not in types:
            raise SqlError(f"MATCH_RECOGNIZE: {defn.name} has no column {'.'.join(path)}")
    alerts = match_rules(raw, FixedRules({name: text}), defn.watermark or DEFAULT_LATENESS)
    measures = _measures_of(rec.body)
    measure_names = [m.lower() for m in measures]
    columns = []
    for path in rule.partition_by:
        field = ".".join(path)
        if path[-1].lower() not in measure_names:
            columns.append(f"{_value('key', field, types.get(path[0].lower()) if len(path) == 1 else None)} "
                           f"AS `{path[-1]}`")
    for measure, expression in measures.items():
        columns.append(f"{_value('measures', measure, _measure_type(expression, types))} AS `{measure}`")
    for extra in ("match_start", "match_end"):
        if extra not in measure_names:
            columns.append(extra)
    if rule.emit_timeouts:
        columns.append("kind AS match_kind")
    return alerts.selectExpr(*columns)


def _as_json(raw, defn):
    """The records of a CSV, Avro or raw stream (or a JSON one with computed columns) as the engine reads them:
    each row's columns as a JSON object (an event-time column as ISO text), at the record's partition and offset;
    and {column: Spark type}."""
    from pyspark.sql import functions as F

    from .sources import decode, quote

    rows = decode(raw, defn)
    names = [c.name for c in defn.columns]
    value = F.to_json(F.struct(*[F.col(quote(n)) for n in names]))
    events = rows.select(value.alias("value"), F.lit(defn.topic).alias("topic"),
                         F.col("ROWPARTITION").alias("partition"), F.col("ROWOFFSET").alias("offset"))
    types = dict(rows.dtypes)
    return events, {n.lower(): types[n] for n in names}


def _measures_of(body: str) -> dict[str, str]:
    """MEASURES expr AS name, ... -> {name: expr}, in order."""
    found = re.search(r"(?is)\bMEASURES\b(.*?)(?=\b(?:ONE\s+ROW|ALL\s+ROWS|AFTER\s+MATCH|PATTERN|DEFINE|WITHIN|"
                      r"EMIT|SUBSET)\b|$)", body)
    if not found:
        return {}
    out = {}
    for item in _top_level_items(found.group(1)):
        named = re.fullmatch(r"(?is)(.*)\s+AS\s+[`\"]?(\w+)[`\"]?", item)
        if not named:
            raise SqlError(f"MATCH_RECOGNIZE: each measure needs a name: {item} AS name")
        out[named.group(2)] = named.group(1).strip()
    return out


def to_dataframe(session, sql: str):
    """The DataFrame of a query with a MATCH_RECOGNIZE clause: the match rows as a view, the rest of the query
    Spark SQL over it."""
    from .session import spark_error

    rec = split(sql)
    digest = hashlib.sha1(sql.encode()).hexdigest()[:10]
    view = f"__match_{digest}"
    matches(session, rec, f"sql_{digest}").createOrReplaceTempView(view)
    rest = sql[:rec.start] + f"{view} AS `{rec.alias or rec.stream}`" + sql[rec.end:]
    try:
        return session.spark.sql(rest)
    except Exception as e:
        raise spark_error(e, rest, 0) from None
