"""A brute-force reference for the matcher: list every way of mapping rows to the pattern's variables,
in the pattern's order of preference, and take the first one whose conditions hold. Data-independent
enumeration, then checking: nothing shared with the program the matcher runs but the expressions."""

from __future__ import annotations

from freshet.cep.expressions import Frame, compile_expression, holds
from freshet.cep.matcher import event_time_ms
from freshet.cep.rules import Alt, Repeat, Rule, Seq, Var


def label_sequences(items: tuple, cap: int):
    """Every label sequence ``items`` can produce, at most ``cap`` long, most preferred first."""
    if not items:
        yield []
        return
    head, rest = items[0], items[1:]
    if isinstance(head, Var):
        if cap >= 1:
            for tail in label_sequences(rest, cap - 1):
                yield [head.name, *tail]
    elif isinstance(head, Seq):
        yield from label_sequences(head.items + rest, cap)
    elif isinstance(head, Alt):
        for option in head.options:
            yield from label_sequences((option,) + rest, cap)
    elif isinstance(head, Repeat):
        if head.min > 0:
            less = Repeat(head.node, head.min - 1, None if head.max is None else head.max - 1, head.greedy)
            yield from label_sequences((head.node, less) + rest, cap)
            return
        again = None
        if head.max is None or head.max > 0:
            again = (head.node, Repeat(head.node, 0, None if head.max is None else head.max - 1, head.greedy)) + rest
        choices = [again, rest] if head.greedy else [rest, again]
        for choice in choices:
            if choice is not None:
                if choice is again and cap <= 0:
                    continue
                yield from label_sequences(choice, cap)


def reference_matches(rule: Rule, events: list[dict]) -> list[tuple]:
    """(key, first row index in its partition, labels, measures) of every match, partition by partition."""
    where = compile_expression(rule.where) if rule.where is not None else None
    conditions = {v: compile_expression(c) for v, c in rule.defines.items()}
    measures = [(n, compile_expression(e)) for n, e in rule.measures]
    partitions: dict = {}
    for seq, event in enumerate(events):
        if where is not None and not holds(where(Frame([event], 0, [], 0, None))):
            continue
        when = event_time_ms(event.get(rule.order_by[0]))
        key = tuple(event.get(p[0]) for p in rule.partition_by)
        partitions.setdefault(key, []).append((when, seq, event))
    out = []
    for key, entries in partitions.items():
        entries.sort(key=lambda e: (e[0], e[1]))
        rows = [e[2] for e in entries]
        times = [e[0] for e in entries]
        start = 0
        while start < len(rows):
            labels = _first_fit(rule, conditions, rows, times, start)
            if labels is None:
                start += 1
                continue
            frame = Frame(rows, start, labels, None, None)
            out.append((key, start, tuple(labels), {n: fn(frame) for n, fn in measures}))
            start = _skip(rule, start, labels)
    return out


def _first_fit(rule, conditions, rows, times, start):
    limit = times[start] + rule.within_ms if rule.within_ms is not None else None
    for labels in label_sequences((rule.pattern,), len(rows) - start):
        if not labels:
            continue
        ok = True
        for i, var in enumerate(labels):
            pos = start + i
            if limit is not None and times[pos] >= limit:
                ok = False
                break
            condition = conditions.get(var)
            if condition is not None and not holds(condition(Frame(rows, start, labels[:i], pos, var))):
                ok = False
                break
        if ok and rule.absent is not None:
            absent = conditions[rule.absent]
            for pos in range(start + len(labels), len(rows)):
                if times[pos] >= limit:
                    break
                if holds(absent(Frame(rows, start, labels, pos, rule.absent))):
                    ok = False
                    break
        if ok:
            return labels
    return None


def _skip(rule, start, labels):
    how, var = rule.skip
    if how == "PAST LAST ROW":
        return start + len(labels)
    if how == "TO NEXT ROW":
        return start + 1
    positions = [start + i for i, v in enumerate(labels) if v == var]
    if not positions:
        return start + 1
    target = positions[0] if how == "TO FIRST" else positions[-1]
    return target if target > start else start + 1
