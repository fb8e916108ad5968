"""Produce quotas per client id, as Kafka enforces them (KIP-13, KIP-219).

The byte rate a client produced over the last ``window_s`` seconds is compared with the quota;
above it, the response carries ``throttle_time_ms`` (how long until the rate is back at the
quota) and the broker stops reading that connection for that long. The data is still written:
a quota slows a producer down, it never drops what it sent.
"""

from __future__ import annotations

import time
from collections import deque


class ProduceQuota:
    def __init__(self, byte_rate: int, window_s: float = 5.0, clock=time.monotonic) -> None:
        self.byte_rate = byte_rate
        self.window_s = window_s
        self.clock = clock
        self._samples: dict[str, deque] = {}

    @property
    def enabled(self) -> bool:
        return self.byte_rate > 0

    def record(self, client_id: str, nbytes: int) -> int:
        """Account ``nbytes`` to ``client_id``; return the throttle time in ms (0: within quota)."""
        if not self.enabled:
            return 0
        now = self.clock()
        samples = self._samples.setdefault(client_id, deque())
        samples.append((now, nbytes))
        while samples and samples[0][0] < now - self.window_s:
            samples.popleft()
        total = sum(n for _, n in samples)
        span = max(now - samples[0][0], 1.0) if samples else self.window_s
        rate = total / span
        if rate <= self.byte_rate:
            return 0
        # the time it takes for the window's bytes to fit the quota
        return int((total / self.byte_rate - span) * 1000)
