"""A differential check of the CEP matcher: random rules in the rule language and random event streams, run
whole (``match_events``) and streamed (events in random batches, out of order within the lateness, the watermark
moving, each key's state dumped and loaded between batches, events given as objects, as text, or put in the
buffer as ``Group.release`` does), by two matchers compared alert for alert.

Used by ``tests/unit/cep/test_review_s22.py`` (the matcher against ``reference.py``, a few hundred cases) and run
by hand against another tree of the matcher (review of issue 50's matcher work, session 22)::

    git worktree add /tmp/rev-cep-base 60437f9
    .venv/bin/python -m tests.unit.cep.differential --base /tmp/rev-cep-base/src/freshet/cep --cases 3000

loads the other tree's ``freshet/cep`` as a package of another name (its imports are relative) and prints the
first cases where the two differ, each cut down to a small one.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import time

import orjson

# ---- rules ----------------------------------------------------------------------------------------------

VARS = ("A", "B", "C")
QUANTIFIERS = ["", "", "*", "*?", "+", "+?", "?", "??", "{2}", "{1,2}", "{1,2}?", "{2,}", "{0,2}"]
CONDITIONS = [
    "{v}.x = 'a'", "x = 'b'", "{v}.x <> 'c'", "{v}.x IN ('a', 'b') AND {v}.n < 3", "{v}.n >= 2", "{v}.n > PREV({v}.n)",
    "PREV(x) = 'a'", "{v}.x = 'a' AND PREV({v}.x) = 'a'", "COUNT({v}.*) <= 2", "{v}.x = FIRST(A.x)", "{v}.x <> A.x",
    "SUM(n) < 6", "SUM({v}.n) >= 4", "COUNT(DISTINCT x) >= 2", "COUNT(DISTINCT x) > 1 AND {v}.n >= 1",
    "LAST(x) = 'a'", "FIRST(n) < {v}.n", "{v}.x IS NULL", "o.y = 1", "COUNT(DISTINCT o.y) > 1", "x = 'a' OR n > 2",
    "NOT (x = 'a')", "FIRST({v}.x) = 'b'", "LAST(A.n) = {v}.n", "{v}.n BETWEEN 1 AND 3", "COUNT(*) >= 3",
    # a side on the row alone beside others (the start rows no first variable can take are skipped on it)
    "{v}.x = 'a' AND B.x IS NULL", "B.x IS NULL AND COUNT(*) < 3", "NOT ({v}.x = 'b') AND SUM(n) < 5",
    "{v}.n > 0 AND A.n IS NULL", "x IN ('a', 'c') AND (n > 1 OR COUNT(*) > 1)", "{v}.x LIKE 'a%' AND {v}.n <> 3",
    "COALESCE({v}.x, 'z') <> 'z' AND FIRST(x) = {v}.x", "{v}.n + 1 > 2 AND PREV(n) IS NOT NULL",
    "{v}.x = A.x AND {v}.n >= 1", "COUNT(DISTINCT x) >= 2 AND x <> 'd' AND {v}.n < 4",
    None, None,
]
# T of ``S*? T`` (the window scan's shape when a count only grows, the attempts' otherwise)
SCAN_CONDITIONS = [
    "COUNT(DISTINCT x) > 2", "COUNT(DISTINCT x) >= 3", "2 < COUNT(DISTINCT x)", "COUNT(DISTINCT x) > 1",
    "COUNT(x) >= 3", "COUNT(*) > 3", "COUNT(DISTINCT x) > 1 AND T.n >= 2", "COUNT(DISTINCT n) >= 2.5",
    "COUNT(DISTINCT x) >= 2 AND COUNT(*) > 2 AND T.x <> 'c'", "COUNT(DISTINCT o.y) > 1", "3 <= COUNT(n)",
    "COUNT(DISTINCT x) > 2 OR x = 'a'", "SUM(n) > 4", "COUNT(DISTINCT T.x) > 1", "COUNT(*) > 2 AND PREV(x) = 'a'",
    "x = 'a' AND COUNT(DISTINCT n) >= 2", "COUNT(DISTINCT x) < 3",
]
MEASURES = [
    "COUNT(*)", "FIRST(x)", "LAST(x)", "FIRST(A.n)", "LAST(A.n)", "SUM(n)", "SUM(A.n)", "COUNT(DISTINCT x)", "A.x",
    "MIN(n)", "MAX(n)", "AVG(n)", "FIRST(event_time)", "LAST(event_time)", "COUNT(A.*)", "o.y", "FIRST(o.y)",
    "LAST(B.x)", "B.n", "FIRST(C.x)", "COUNT(DISTINCT A.x)", "FIRST(o)",
]


def _pattern(rng: random.Random, depth: int = 0) -> str:
    roll = rng.random()
    if depth >= 2 or roll < 0.45:
        item = rng.choice(VARS)
    elif roll < 0.75:
        item = "(" + " ".join(_pattern(rng, depth + 1) for _ in range(rng.randint(2, 3))) + ")"
    else:
        item = "(" + " | ".join(_pattern(rng, depth + 1) for _ in range(2)) + ")"
    return item + rng.choice(QUANTIFIERS)


def random_rule(rng: random.Random) -> str:
    """A rule's text: a random pattern over A B C, or one of the shapes the matcher has shortcuts for (a few
    tries for a pattern the parser takes: one that can match no rows is refused)."""
    from freshet.cep.rules import parse_rule
    for _ in range(8):
        text = _random_rule(rng)
        try:
            parse_rule(text)
        except ValueError:
            continue
        return text
    return text


def _random_rule(rng: random.Random) -> str:
    shape = rng.random()
    defines: dict[str, str | None] = {}
    absent = None
    if shape < 0.35:
        pattern = " ".join(_pattern(rng) for _ in range(rng.randint(1, 3)))
        variables = list(VARS)
    elif shape < 0.6:
        s_quantifier = rng.choice(["*?", "*?", "*?", "*", "+?"])
        pattern, variables = f"S{s_quantifier} T", ["S", "T"]
        defines["T"] = rng.choice(SCAN_CONDITIONS)
        if rng.random() < 0.15:
            defines["S"] = rng.choice(["x <> 'c'", "S.n >= 0"])
    elif shape < 0.7:
        pattern, variables = "A X*? B", ["A", "B"]
        defines["B"] = rng.choice(["B.x <> A.x", "B.x = 'a'", "COUNT(DISTINCT x) > 2", "B.n > A.n"])
    elif shape < 0.8:
        pattern, variables = f"A{rng.choice(['{2,}', '{3,}', '+', '{1,3}'])} B", ["A", "B"]
    elif shape < 0.9:
        pattern, variables = rng.choice(["(A)", "(A B?)", "(A B)", "(A+)", "(A C? B)"]), ["A", "B", "C"]
        absent = "N"
        defines["N"] = rng.choice(["x = 'b'", "N.n > 2", "N.x = A.x", "x IS NULL"])
    else:
        pattern, variables = f"A B{rng.choice(['?', '??', '*', '*?', '+'])} C", ["A", "B", "C"]
    if shape < 0.35:
        variables = [v for v in VARS if v in pattern] or ["A"]
    named = [v for v in variables if v != "S"] or variables

    def own(text: str) -> str:  # A., B., C. of the pool: the pattern's own variables
        for i, v in enumerate(("A", "B", "C")):
            text = text.replace(f"{v}.", f"@{i}.")
        for i in range(3):
            text = text.replace(f"@{i}.", f"{named[i % len(named)]}.")
        return text

    for v in variables:
        if v not in defines and v not in ("S", "X"):
            condition = rng.choice(CONDITIONS)
            if condition is not None:
                defines[v] = own(condition).format(v=v)
    within = rng.choice([None, None, 1, 2, 3, 4, 6, 20]) if absent is None else rng.choice([1, 2, 3, 5, 20])
    skip_var = rng.choice(variables)
    skip = rng.choice(["", "AFTER MATCH SKIP PAST LAST ROW", "AFTER MATCH SKIP TO NEXT ROW",
                       "AFTER MATCH SKIP TO NEXT ROW", f"AFTER MATCH SKIP TO FIRST {skip_var}",
                       f"AFTER MATCH SKIP TO LAST {skip_var}"])
    measures = [own(m) for m in rng.sample(MEASURES, rng.randint(0, 4))]
    parts = ["RULE r"]
    if rng.random() < 0.2:
        parts.append(rng.choice(["WHERE x IS NOT NULL", "WHERE n >= 0", "WHERE k <> 2 AND n < 4"]))
    if rng.random() < 0.8:
        parts.append("PARTITION BY k")
    if measures:
        parts.append("MEASURES " + ", ".join(f"{m} AS m{i}" for i, m in enumerate(measures)))
    parts.append(f"PATTERN ({pattern})")
    if absent:
        parts.append(f"NOT FOLLOWED BY {absent}")
    written = [f"{v} AS {c}" for v, c in defines.items() if c is not None]
    if written:
        parts.append("DEFINE " + ", ".join(written))
    if within is not None:
        parts.append(f"WITHIN {within} MILLISECONDS")
    if skip:
        parts.append(skip)
    if within is not None and rng.random() < 0.3:
        parts.append("EMIT TIMEOUTS")
    return " ".join(parts)


# ---- events ---------------------------------------------------------------------------------------------

def random_events(rng: random.Random, most: int) -> list[dict]:
    """Few keys, ties in time, repeated events, values that meet and miss the conditions, missing fields."""
    events: list[dict] = []
    span = rng.choice([4, 8, 15, max(15, most)])  # ties often; a row exactly at a WITHIN bound often
    for _ in range(rng.randint(0, most)):
        if events and rng.random() < 0.1:
            events.append(dict(rng.choice(events)))  # a duplicate
            continue
        event = {"k": rng.choice([0, 0, 1, 2]), "event_time": rng.randint(0, span)}
        if rng.random() < 0.85:
            event["x"] = rng.choice("aabcd")
        if rng.random() < 0.9:
            event["n"] = rng.choice([-1, 0, 1, 2, 2, 3, 4])
        if rng.random() < 0.3:
            event["o"] = {"y": rng.choice([1, 2, 1.0, True, None])}
        events.append(event)
    return events


# ---- one run ----------------------------------------------------------------------------------------------

def _row(match) -> tuple:
    return (orjson.dumps(match.alert(), option=orjson.OPT_SORT_KEYS).decode(), tuple(match.labels))


def run_whole(mod, text: str, events: list[dict]) -> list:
    """``match_events`` over the events; ("error", type) if the rule is refused."""
    try:
        rule = mod.rules.parse_rule(text)
    except ValueError as e:
        return [("refused", type(e).__name__)]
    return [_row(m) for m in mod.matcher.match_events(rule, [dict(e) for e in events])]


def stream_script(rng: random.Random, events: list[dict]) -> dict:
    """How the events reach the matchers, decided once for both sides: arrival order (out of order within the
    lateness, sometimes one late event), batches, watermarks, the form each event comes in, dumps between batches,
    and whether the stream ends (closed) or only its watermark moves on."""
    lateness = rng.choice([0, 1, 2, 4])
    arrival = sorted(range(len(events)), key=lambda i: events[i]["event_time"] + rng.uniform(0, lateness))
    if len(arrival) > 3 and rng.random() < 0.15:  # one event far behind: late
        i = arrival.pop(rng.randrange(len(arrival) // 2))
        arrival.append(i)
    steps: list[tuple] = []
    order_kind = rng.choice(["int", "list"])  # the order key of ties: an offset, or [partition, offset]
    for i in arrival:
        steps.append(("add", i, rng.choice(["object", "text", "buffer", "buffer"]), order_kind))
        if rng.random() < 0.35:
            steps.append(("advance", lateness, rng.choice([0, 0, 0, 1, 3])))
            if rng.random() < 0.5:
                steps.append(("dump", rng.choice(["state", "compact", "compact"])))
    steps.append(("advance", lateness, rng.choice([0, 2, 6])))
    if rng.random() < 0.3:
        steps.append(("dump", "compact"))
    steps.append(("end", rng.random() < 0.75))
    return {"steps": steps}


def run_stream(mod, text: str, events: list[dict], script: dict) -> list:
    try:
        rule = mod.rules.parse_rule(text)
    except ValueError as e:
        return [("refused", type(e).__name__)]
    compiled = mod.matcher.CompiledRule(rule)
    matchers: dict = {}
    out: list = []
    newest = None
    late = 0
    for step in script["steps"]:
        if step[0] == "add":
            _, i, form, order_kind = step
            event = dict(events[i])
            if not compiled.accepts(event):
                continue
            when = compiled.time_of(event)
            if when is None:
                continue
            key = compiled.key_of(event)
            matcher = matchers.get(key)
            if matcher is None:
                matcher = matchers[key] = mod.matcher.PartitionMatcher(compiled, key)
            newest = when if newest is None else max(newest, when)
            order = i if order_kind == "int" else [0, i]
            if form == "object":
                matcher.add(event, when, order)  # a late one is counted in matcher.late
            elif form == "text":
                matcher.add_text(orjson.dumps(event).decode(), when, order)
            elif matcher.watermark is not None and when <= matcher.watermark:
                late += 1  # Group.feed drops it
            else:  # as Group.release hands events over: straight into the buffer, as text
                matcher.buffer.append((when, order, orjson.dumps(event).decode()))
        elif step[0] == "advance":
            if newest is None:
                continue
            watermark = newest - step[1] - 1 + step[2]
            for key in list(matchers):
                out.extend(_row(m) for m in matchers[key].advance(watermark))
        elif step[0] == "dump":
            for key, m in list(matchers.items()):
                if step[1] == "state":
                    matchers[key] = mod.matcher.PartitionMatcher.from_state(
                        compiled, key, orjson.loads(orjson.dumps(m.to_state())))
                else:
                    lines = ["before"]
                    numbers = orjson.loads(orjson.dumps(m.to_compact(lines)))
                    lines = "\n".join([*lines, "after"]).split("\n")
                    matchers[key], end = mod.matcher.PartitionMatcher.from_compact(compiled, key, numbers, lines, 1)
                    assert lines[end] == "after"
        else:  # end
            closed = step[1]
            for key in list(matchers):
                if closed:
                    out.extend(_row(m) for m in matchers[key].advance(None, closed=True))
                else:
                    out.extend(_row(m) for m in matchers[key].advance(10**6))
    late_counted = sum(m.late for m in matchers.values())
    return out + [("late", late + late_counted)]


# ---- loading the other tree --------------------------------------------------------------------------

class Tree:
    """A tree's ``cep`` package: ``.matcher``, ``.rules``."""

    def __init__(self, matcher, rules) -> None:
        self.matcher, self.rules = matcher, rules


def current() -> Tree:
    from freshet.cep import matcher, rules
    return Tree(matcher, rules)


def load_tree(cep_dir: str, name: str = "freshet_cep_base") -> Tree:
    spec = importlib.util.spec_from_file_location(name, f"{cep_dir}/__init__.py",
                                                  submodule_search_locations=[cep_dir])
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    return Tree(importlib.import_module(f"{name}.matcher"), importlib.import_module(f"{name}.rules"))


# ---- comparing ----------------------------------------------------------------------------------------------

def outcome(tree: Tree, text: str, events: list[dict], scripts: list[dict]) -> list:
    try:
        return [run_whole(tree, text, events), *(run_stream(tree, text, events, s) for s in scripts)]
    except Exception as e:  # noqa: BLE001 - a crash is a difference too
        return [("crash", type(e).__name__, str(e)[:200])]


def case(seed: int, most: int = 14) -> tuple[str, list[dict], list[dict]]:
    rng = random.Random(seed)
    text = random_rule(rng)
    events = random_events(rng, most)
    scripts = [stream_script(rng, events) for _ in range(3)]
    return text, events, scripts


def shrink(base: Tree, new: Tree, text: str, events: list[dict], scripts: list[dict]):
    """Fewer events (and stream steps) while the two still differ."""
    def differs(evs, scs):
        return outcome(base, text, evs, scs) != outcome(new, text, evs, scs)

    changed = True
    while changed:
        changed = False
        for i in range(len(events)):
            fewer = events[:i] + events[i + 1:]
            remap = {old: (old if old < i else old - 1) for old in range(len(events)) if old != i}
            scs = [{"steps": [s if s[0] != "add" else (s[0], remap[s[1]], *s[2:])
                              for s in sc["steps"] if not (s[0] == "add" and s[1] == i)]} for sc in scripts]
            if differs(fewer, scs):
                events, scripts, changed = fewer, scs, True
                break
        for j, sc in enumerate(scripts):
            if len(scripts) > 1 and differs(events, scripts[:j] + scripts[j + 1:]):
                scripts, changed = scripts[:j] + scripts[j + 1:], True
                break
    return events, scripts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the other tree's freshet/cep directory")
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--most", type=int, default=14, help="events a case at most")
    parser.add_argument("--show", type=int, default=5, help="differences to print")
    args = parser.parse_args()
    base, new = load_tree(args.base), current()
    cpu0, shown, differ, refused = time.process_time(), 0, 0, 0
    kinds: dict = {}
    for seed in range(args.first_seed, args.first_seed + args.cases):
        text, events, scripts = case(seed, args.most)
        ours, theirs = outcome(new, text, events, scripts), outcome(base, text, events, scripts)
        if ours[0] and ours[0][0][0] == "refused":
            refused += 1
        if not (ours[0] and ours[0][0][0] == "refused"):
            compiled = new.matcher.CompiledRule(new.rules.parse_rule(text))
            for name in ("scan", "first_row"):
                kinds[name] = kinds.get(name, 0) + (getattr(compiled, name, None) is not None)
        if ours != theirs:
            differ += 1
            if shown < args.show:
                shown += 1
                events, scripts = shrink(base, new, text, events, scripts)
                print(f"--- seed {seed}\nrule: {text}\nevents: {orjson.dumps(events).decode()}")
                print(f"scripts: {scripts}")
                a, b = outcome(base, text, events, scripts), outcome(new, text, events, scripts)
                for i, (x, y) in enumerate(zip(a, b)):
                    if x != y:
                        print(f"  run {i} ({'whole' if i == 0 else 'stream'}):\n    base: {x}\n    new:  {y}")
    print(f"{args.cases} cases ({refused} rules refused by both, {kinds} took the shortcut), {differ} differ; "
          f"{time.process_time() - cpu0:.1f} CPU s")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
