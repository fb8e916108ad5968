"""Waiting for something a broker, a connector or Spark does in its own time, without guessing a sleep."""

import time


def wait_for(predicate, timeout: float = 60.0, what: str = "condition", interval: float = 0.1) -> None:
    """Call ``predicate`` every ``interval`` seconds until it is true; AssertionError naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
