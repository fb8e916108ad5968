"""Web server access logs in the Apache combined log format, with event-time disorder.

    216.58.210.78 - - [27/Feb/2015:17:55:11 +0000] "GET /css/typography.css HTTP/1.1" 200 3377
    "http://martin.kleppmann.com/" "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_9_5) ..."

Each event carries its event time (the bracketed time, also the record timestamp) apart from
when it is produced: a chosen fraction arrives out of order (up to ``max_disorder_s`` behind the
stream's clock) and a smaller fraction arrives late (minutes behind), so that watermarks and
late-data handling have something to do.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterator

PATHS = [
    "/", "/index.html", "/about", "/blog", "/blog/stream-processing", "/blog/logs", "/css/typography.css",
    "/js/app.js", "/img/logo.png", "/search", "/products", "/products/42", "/cart", "/checkout", "/api/v1/events",
]
PATH_WEIGHTS = [10, 8, 2, 6, 5, 4, 7, 7, 6, 4, 5, 3, 2, 1, 3]
REFERRERS = ["-", "http://example.com/", "https://www.google.com/", "https://news.ycombinator.com/"]
AGENTS = [
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_9_5) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/40.0 Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
    "curl/8.4.0",
]
STATUSES = [200] * 90 + [304] * 5 + [404] * 4 + [500]


@dataclass(frozen=True, slots=True)
class AccessEvent:
    timestamp_ms: int  # event time
    client_ip: str
    line: str


def format_line(ip: str, ts_ms: int, method: str, path: str, status: int, size: int, referrer: str, agent: str) -> str:
    when = datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc).strftime("%d/%b/%Y:%H:%M:%S +0000")
    return f'{ip} - - [{when}] "{method} {path} HTTP/1.1" {status} {size} "{referrer}" "{agent}"'


class AccessLogGenerator:
    def __init__(self, seed: int = 1, users: int = 500, rate_per_s: float = 1000.0,
                 out_of_order: float = 0.05, late: float = 0.01, max_disorder_s: float = 30.0,
                 late_by_s: tuple[float, float] = (120.0, 900.0), start_ms: int | None = None) -> None:
        if not 0 <= out_of_order <= 1 or not 0 <= late <= 1:
            raise ValueError("out_of_order and late are fractions between 0 and 1")
        if rate_per_s <= 0:
            raise ValueError("rate must be positive")
        self.rng = random.Random(seed)
        self.ips = [f"{self.rng.randint(1, 223)}.{self.rng.randint(0, 255)}.{self.rng.randint(0, 255)}."
                    f"{self.rng.randint(1, 254)}" for _ in range(users)]
        self.rate = rate_per_s
        self.out_of_order = out_of_order
        self.late = late
        self.max_disorder_ms = int(max_disorder_s * 1000)
        self.late_by_ms = (int(late_by_s[0] * 1000), int(late_by_s[1] * 1000))
        self.clock_ms = start_ms if start_ms is not None else int(time.time() * 1000)

    def events(self) -> Iterator[AccessEvent]:
        """An endless stream; the stream clock advances 1/rate seconds per event."""
        rng = self.rng
        step = 1000.0 / self.rate
        clock = float(self.clock_ms)
        while True:
            clock += step
            ts = int(clock)
            roll = rng.random()
            if roll < self.late:
                ts -= rng.randint(*self.late_by_ms)
            elif roll < self.late + self.out_of_order:
                ts -= rng.randint(1, max(self.max_disorder_ms, 1))
            ip = rng.choice(self.ips)
            path = rng.choices(PATHS, PATH_WEIGHTS)[0]
            status = rng.choice(STATUSES)
            size = 0 if status == 304 else int(rng.lognormvariate(8, 1.2))
            method = "POST" if path in ("/checkout", "/api/v1/events") else "GET"
            yield AccessEvent(ts, ip, format_line(ip, ts, method, path, status, size,
                                                  rng.choice(REFERRERS), rng.choice(AGENTS)))
