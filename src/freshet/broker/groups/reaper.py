"""A task that acts on deadlines when they come (sessions ending, locks running out), not on a fixed tick.

``Reaper(check)`` calls ``check(now)``, which acts on every deadline already past and returns the nearest one
still ahead (None: none), and sleeps until then. Whoever sets a deadline that may come sooner tells it with
``due(when)``. A heartbeat only moves a deadline later, so it need not: the reaper wakes at the old deadline,
finds it moved, and sleeps again. An idle broker is not woken at all (the coordinators' 0.1-0.25 s ticks cost
an idle broker ~3 ms of CPU a second, and as much again beside a light load).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Callable

log = logging.getLogger(__name__)

MIN_SLEEP_S = 0.01  # a deadline past or at hand is checked again after this at the soonest: never a busy loop
RETRY_S = 1.0  # after a check that failed


class Reaper:
    def __init__(self, check: Callable[[float], float | None], name: str) -> None:
        self._check = check
        self._name = name
        self._next = math.inf  # when the task wakes next (monotonic seconds)
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.checks = 0  # how many times check ran

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def due(self, when: float) -> None:
        """A deadline at ``when`` (time.monotonic()): the reaper wakes by then."""
        if when < self._next:
            self._next = when
            self._changed.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._changed.clear()
            now = time.monotonic()
            self.checks += 1
            try:
                nearest = self._check(now)
            except Exception:
                log.exception("%s: the deadline check failed", self._name)
                nearest = now + RETRY_S
            if nearest is None:
                self._next = math.inf
                await self._changed.wait()
                continue
            self._next = max(nearest, now + MIN_SLEEP_S)
            # loop.time() and time.monotonic() are the same clock on Linux; the difference is taken anyway
            timer = loop.call_at(loop.time() + (self._next - time.monotonic()), self._changed.set)
            try:
                await self._changed.wait()
            finally:
                timer.cancel()
