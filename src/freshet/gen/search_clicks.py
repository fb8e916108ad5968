"""Searches and the clicks they lead to (for the stream-stream join).

Each search has an id, a user, a query and its event time; with probability ``click_rate`` it is
followed by one click on a result URL, usually within minutes, sometimes after more than an hour
(then it does not count as a click-through).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Iterator

QUERIES = ["stream processing", "kafka log", "spark window", "watermark", "change data capture", "event sourcing",
           "exactly once", "materialized view"]


@dataclass(frozen=True)
class SearchEvent:
    search_id: str
    user: str
    query: str
    ts_ms: int

    def value(self) -> bytes:
        return json.dumps({"search_id": self.search_id, "user": self.user, "query": self.query,
                           "ts": self.ts_ms}).encode()


@dataclass(frozen=True)
class ClickEvent:
    search_id: str
    user: str
    url: str
    ts_ms: int

    def value(self) -> bytes:
        return json.dumps({"search_id": self.search_id, "user": self.user, "url": self.url,
                           "ts": self.ts_ms}).encode()


def search_clicks(n: int, seed: int = 1, start_ms: int = 1_767_225_600_000, every_ms: int = 1000,
                  click_rate: float = 0.3, late_click_rate: float = 0.05) -> Iterator[SearchEvent | ClickEvent]:
    """``n`` searches with their clicks, in event-time order of searches (clicks follow their search)."""
    rng = random.Random(seed)
    for i in range(n):
        ts = start_ms + i * every_ms
        query = rng.choice(QUERIES)
        search = SearchEvent(f"s{i}", f"u{rng.randrange(200)}", query, ts)
        yield search
        if rng.random() < click_rate:
            delay = rng.randint(61, 180) * 60_000 if rng.random() < late_click_rate else rng.randint(1, 1800) * 1000
            url = f"https://example.com/{query.replace(' ', '-')}/{rng.randrange(5)}"
            yield ClickEvent(search.search_id, search.user, url, ts + delay)
