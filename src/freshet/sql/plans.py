"""What the SQL front end reads from Spark's analyzed plan of a query (through py4j; None or False where the plan
cannot be read, as over Spark Connect): the key of an update-mode result (``freshet.sql.changes``), and a join
Spark cannot run on streams (two streaming aggregations, as two tables are).
"""

from __future__ import annotations

# nodes above the aggregation that keep the rows and attributes of their child. Not a filter (HAVING, a table's
# deleted keys): a row it hides and later lets through again unchanged is a change to print
_PASS_THROUGH = {"SubqueryAlias", "View"}


def _seq(scala_seq) -> list:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def _kind(jobject) -> str:
    return jobject.getClass().getSimpleName()


def _id(attribute) -> int:
    return attribute.exprId().id()


def key_columns(df, select: str | None = None, group_keys=None) -> list[int] | None:
    """The positions of ``df``'s output columns that identify a row of its streaming aggregation: [] when the
    aggregation has no grouping key (one row); None when there is no aggregation, or its key is not in the
    output (every row is then a row of its own). Over Spark Connect (no plan objects here), from the text of the
    query ``select`` (its GROUP BY columns, ``group_keys(select, columns)``) and of its analyzed plan."""
    try:
        if not hasattr(df, "_jdf"):
            return _connect_key_columns(df, select, group_keys) if select is not None else None
        return _key_columns(_analyzed(df))
    except Exception:  # a plan of a shape not foreseen: every row is given
        return None


def analyzed_text(df) -> str:
    """Spark's analyzed logical plan of ``df`` as text (over Spark Connect: the server's EXPLAIN EXTENDED)."""
    if hasattr(df, "_jdf"):
        return _analyzed(df).toString()
    explained = df._explain_string(extended=True)
    section = explained.split("== Analyzed Logical Plan ==", 1)[1].split("\n== ", 1)[0].strip("\n")
    return section.split("\n", 1)[1] if "\n" in section else section  # less its first line, the output schema


def _connect_key_columns(df, select: str, group_keys) -> list[int] | None:
    """``key_columns`` from the text: the GROUP BY columns of ``select`` as selected (None with a HAVING); with no
    GROUP BY, [] when the plan's top aggregation, under projections and views only, has no grouping key."""
    import re

    from .errors import SqlError

    try:
        keys = group_keys(select, list(df.columns))
    except SqlError:
        return None
    if keys:
        found = [df.columns.index(k) for k in keys if k in df.columns]
        return found if len(found) == len(keys) and not re.search(r"(?i)\bHAVING\b", select) else None
    for line in analyzed_text(df).splitlines():
        name, _, rest = line.lstrip(" :+-~!'").partition(" ")
        if name in ("Project", "SubqueryAlias", "View"):
            continue
        if name != "Aggregate" or not rest.startswith("["):
            return None
        depth = 0
        for i, ch in enumerate(rest):  # "[aggregates]" alone, or "[grouping], [aggregates]"
            depth += (ch == "[") - (ch == "]")
            if depth == 0:
                return [] if not rest[i + 1:].lstrip().startswith(", [") else None
        return None
    return None


def _analyzed(df):
    return df._jdf.queryExecution().analyzed()


def _key_columns(plan) -> list[int] | None:
    above = []
    while plan.nodeName() != "Aggregate":
        children = _seq(plan.children())
        if len(children) != 1 or (plan.nodeName() != "Project" and plan.nodeName() not in _PASS_THROUGH):
            return None
        above.append(plan)
        plan = children[0]
    grouping = _seq(plan.groupingExpressions())
    # exprId of an output attribute -> the grouping expressions (their positions) it carries
    carries: dict[int, set[int]] = {}
    for named in _seq(plan.aggregateExpressions()):
        expression = named.child() if _kind(named) == "Alias" else named
        found = {i for i, g in enumerate(grouping) if expression.semanticEquals(g)
                 or (_kind(expression) == "GetStructField" and expression.child().semanticEquals(g))}
        if found:
            carries[_id(named)] = found
    for node in reversed(above):
        if node.nodeName() != "Project":
            continue
        kept: dict[int, set[int]] = {}
        for named in _seq(node.projectList()):
            expression = named.child() if _kind(named) == "Alias" else named
            if _kind(expression) == "AttributeReference" and _id(expression) in carries:
                kept[_id(named)] = carries[_id(expression)]
        carries = kept
    output = _seq(above[0].output() if above else plan.output())
    keys = [i for i, attribute in enumerate(output) if _id(attribute) in carries]
    covered = set().union(*(carries[_id(output[i])] for i in keys)) if keys else set()
    if covered != set(range(len(grouping))):
        return None
    return keys


def _has(plan, node_name: str) -> bool:
    return plan.nodeName() == node_name or any(_has(child, node_name) for child in _seq(plan.children()))


def joins_two_aggregations(df) -> bool:
    """Whether the query joins two streaming aggregations (two tables, each the latest row per key), which Spark
    refuses with a message about watermarks or output modes. Over Spark Connect, read from the text of the
    server's analyzed plan."""
    try:
        if not hasattr(df, "_jdf"):
            return plan_text_joins_two_aggregations(analyzed_text(df))
        pending = [_analyzed(df)]
        while pending:
            plan = pending.pop()
            children = _seq(plan.children())
            if plan.nodeName() == "Join" and all(c.isStreaming() and _has(c, "Aggregate") for c in children):
                return True
            pending += children
    except Exception:  # a plan not readable here
        return False
    return False


def _text_tree(text: str) -> list[dict]:
    """A plan's tree string as nodes ``{"text", "children"}`` (the roots): a child's line is its parent's indent
    and ``+- `` or ``:- `` (three characters a level); a line without one continues the node above."""
    import re

    roots: list[dict] = []
    stack: list[tuple[int, dict]] = []
    for line in text.splitlines():
        found = re.match(r"^((?:   |:  )*)([+:]- )?(.*)$", line)
        prefix, marker, body = found.group(1), found.group(2), found.group(3)
        if not marker and prefix:
            continue
        depth = len(prefix) // 3 + 1 if marker else 0
        node = {"text": body.lstrip("~").strip(), "children": []}
        while stack and stack[-1][0] >= depth:
            stack.pop()
        (stack[-1][1]["children"] if stack else roots).append(node)
        stack.append((depth, node))
    return roots


def _text_has(node: dict, prefix: str) -> bool:
    return node["text"].startswith(prefix) or any(_text_has(c, prefix) for c in node["children"])


def plan_text_joins_two_aggregations(text: str) -> bool:
    """``joins_two_aggregations`` from an analyzed plan's text: a Join whose two sides each aggregate a stream."""
    pending = _text_tree(text)
    while pending:
        node = pending.pop()
        sides = node["children"]
        if (node["text"].startswith("Join ") and len(sides) == 2
                and all(_text_has(c, "Aggregate") and _text_has(c, "StreamingRelation") for c in sides)):
            return True
        pending += sides
    return False
