"""Which rows of an update-mode push query are changes.

Spark's update mode writes, in each microbatch, the row of every key its aggregation *touched*, changed or not:
a global aggregation (``SELECT count(*) FROM s``, no grouping key) is evaluated in every batch, including the
no-data batches Spark runs when the watermark moves and batches whose rows were all filtered out or dropped as
late, so it writes its unchanged row again; a ``max`` or ``collect_set`` that a new row does not move is written
again too. ksqlDB's ``EMIT CHANGES`` prints a row when it changed; so does ``freshet sql``: a push query keeps the
last row it gave per key and gives a row only when it differs.

The key is read from Spark's analyzed plan, not from the SQL text: the top aggregation's grouping expressions,
followed up through the projections, filters and views above it to the output columns that carry them (a column,
an alias of it, ``window.start`` of a window). With no grouping key the query has one row. When a grouping key is
not among the output columns (``SELECT count(*) FROM s GROUP BY user_id``), or a filter stands above the
aggregation (``HAVING``; a table's deleted keys, which leave the result without a row saying so), every row is
given as Spark writes it.
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


def key_columns(df) -> list[int] | None:
    """The positions of ``df``'s output columns that identify a row of its streaming aggregation: [] when the
    aggregation has no grouping key (one row); None when there is no aggregation, or its key is not in the
    output (every row is then a row of its own)."""
    try:
        return _key_columns(df._jdf.queryExecution().analyzed())
    except Exception:  # a plan of a shape not foreseen (Spark Connect has no _jdf): every row is given
        return None


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


class Changes:
    """Gives each row that differs from the last row given for its key (``key_columns``); ``key=None``: every
    row."""

    def __init__(self, key: list[int] | None) -> None:
        self.key = key
        self.last: dict[tuple, tuple] = {}

    def __call__(self, rows: list[tuple]) -> list[tuple]:
        if self.key is None:
            return rows
        changed = []
        for row in rows:
            key = tuple(row[i] for i in self.key)
            if self.last.get(key) != row:
                self.last[key] = row
                changed.append(row)
        return changed
