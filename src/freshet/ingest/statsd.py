"""StatsD lines (``name:value|type[|@rate][|#tag:v,...]``, several per datagram, one per line) parsed into
JSON-ready dicts. Types: c (counter), g (gauge; a leading + or - makes it a change), ms and h (timer,
histogram), d (distribution, as DogStatsD), s (set: the value is a member, any string). A line that is not
StatsD is counted by the caller and dropped, as StatsD itself does with bad lines."""

from __future__ import annotations

import math

TYPES = {"c": "counter", "g": "gauge", "ms": "timer", "h": "histogram", "d": "distribution", "s": "set"}


class BadLine(ValueError):
    pass


def parse_datagram(data: bytes, received_ms: int) -> tuple[list[dict], int]:
    """(metrics, bad lines) of one datagram."""
    text = data.decode("utf-8", "replace")
    metrics: list[dict] = []
    bad = 0
    for line in text.split("\n"):
        line = line.strip()
        if not line:
            continue
        try:
            metrics.append(parse_line(line, received_ms))
        except BadLine:
            bad += 1
    return metrics, bad


def parse_line(line: str, received_ms: int) -> dict:
    name, sep, rest = line.partition(":")
    if not sep or not name or "|" in name:
        raise BadLine(f"no name:value in {line[:80]!r}")
    fields = rest.split("|")
    if len(fields) < 2:
        raise BadLine(f"no |type in {line[:80]!r}")
    raw, kind = fields[0], fields[1]
    if kind not in TYPES:
        raise BadLine(f"unknown type {kind[:10]!r}")
    rate = 1.0
    tags: dict[str, str] = {}
    for extra in fields[2:]:
        if extra.startswith("@"):
            try:
                rate = float(extra[1:])
            except ValueError:
                raise BadLine(f"bad sample rate {extra[:20]!r}") from None
            if not (0.0 < rate <= 1.0):
                raise BadLine(f"sample rate {extra[:20]!r} outside (0, 1]")
        elif extra.startswith("#"):
            for tag in extra[1:].split(","):
                if tag:
                    k, _, v = tag.partition(":")
                    tags[k] = v
        elif extra.startswith(("c:", "T")):
            continue  # DogStatsD container id / timestamp fields: accepted, not kept
        else:
            raise BadLine(f"unknown field {extra[:20]!r}")
    metric = {"name": name, "type": TYPES[kind], "value": None, "member": None, "delta": False,
              "sample_rate": rate, "tags": tags, "received_ms": received_ms}
    if kind == "s":
        if not raw:
            raise BadLine("empty set member")
        metric["member"] = raw
        return metric
    try:
        value = float(raw)
    except ValueError:
        raise BadLine(f"value {raw[:20]!r} is not a number") from None
    if not math.isfinite(value):
        raise BadLine(f"value {raw[:20]!r} is not finite")
    if kind == "g" and raw[:1] in "+-":
        metric["delta"] = True
    metric["value"] = value
    return metric
