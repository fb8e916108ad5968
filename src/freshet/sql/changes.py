"""Which rows of an update-mode push query are changes.

Spark's update mode writes, in each microbatch, the row of every key its aggregation *touched*, changed or not:
a global aggregation (``SELECT count(*) FROM s``, no grouping key) is evaluated in every batch, including the
no-data batches Spark runs when the watermark moves and batches whose rows were all filtered out or dropped as
late, so it writes its unchanged row again; a ``max`` or ``collect_set`` that a new row does not move is written
again too. ksqlDB's ``EMIT CHANGES`` prints a row when it changed; so does ``freshet sql``: a push query keeps the
last row it gave per key and gives a row only when it differs.

The key is read from Spark's analyzed plan (``freshet.sql.plans.key_columns``), not from the SQL text: the top
aggregation's grouping expressions, followed up through the projections and views above it to the output columns
that carry them (a column, an alias of it, ``window.start`` of a window). With no grouping key the query has one row. When a grouping key is
not among the output columns (``SELECT count(*) FROM s GROUP BY user_id``), or a filter stands above the
aggregation (``HAVING``; a table's deleted keys, which leave the result without a row saying so), every row is
given as Spark writes it.
"""

from __future__ import annotations

from collections import OrderedDict

KEPT_KEYS = 100_000  # the keys whose last row a push query remembers (windows come and go: the oldest go first)


class Changes:
    """Gives each row that differs from the last row given for its key (``key_columns``); ``key=None``: every
    row. The last rows of at most ``kept`` keys are remembered, the least recently changed forgotten first (a
    forgotten key's unchanged row is given again, as Spark writes it)."""

    def __init__(self, key: list[int] | None, kept: int = KEPT_KEYS) -> None:
        self.key, self.kept = key, kept
        self.last: OrderedDict[tuple, tuple] = OrderedDict()

    def __call__(self, rows: list[tuple]) -> list[tuple]:
        if self.key is None:
            return rows
        changed = []
        for row in rows:
            key = tuple(row[i] for i in self.key)
            if self.last.get(key) != row:
                self.last[key] = row
                self.last.move_to_end(key)
                changed.append(row)
                if len(self.last) > self.kept:
                    self.last.popitem(last=False)
        return changed
