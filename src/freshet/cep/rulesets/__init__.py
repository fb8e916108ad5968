"""The rules Freshet ships, as files a user can read and copy: ``intrusion``, ``fraud``, ``telco``."""

from __future__ import annotations

import re
from importlib import resources

from ..rules import Rule, parse_rule

RULE_START = re.compile(r"(?im)^[ \t]*RULE\b")


def split_rules(text: str) -> list[str]:
    """A rules file's rules, each as its own text (a file holds one or more, each starting RULE at the
    start of a line; comments before the first belong to none)."""
    starts = [m.start() for m in RULE_START.finditer(text)]
    return [text[a:b].strip() for a, b in zip(starts, starts[1:] + [len(text)])]


def names() -> list[str]:
    return sorted(p.name.removesuffix(".rules") for p in resources.files(__package__).iterdir()
                  if p.name.endswith(".rules"))


def text(name: str) -> str:
    if name not in names():
        raise KeyError(f"no rule set {name!r}; there are {', '.join(names())}")
    return resources.files(__package__).joinpath(f"{name}.rules").read_text()


def ruleset(name: str) -> list[Rule]:
    return [parse_rule(t) for t in split_rules(text(name))]
