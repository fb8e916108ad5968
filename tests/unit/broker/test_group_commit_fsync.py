"""A group-commit round fsyncs the segments of every partition written at once, not one after another (the
file system then commits its journal once for all of them), and still reports the ones that failed."""

import threading
from concurrent.futures import ThreadPoolExecutor

from freshet.broker.durability import _fsync_all
from freshet.log import StorageError


class FakeSegment:
    def __init__(self, barrier: threading.Barrier | None, fails: bool = False, fd: int = 3) -> None:
        self.barrier, self.fails, self.fd = barrier, fails, fd
        self.flushed = False

    def flush(self) -> None:
        if self.barrier is not None:
            self.barrier.wait(timeout=60)  # every segment's fsync has started before any ends
        if self.fails:
            raise StorageError("fsync failed")
        self.flushed = True


def test_a_rounds_segments_are_fsynced_at_once():
    barrier = threading.Barrier(4)
    segments = [FakeSegment(barrier) for _ in range(4)]
    with ThreadPoolExecutor(8) as pool:
        assert _fsync_all(segments, pool) == []
    assert all(s.flushed for s in segments)


def test_failed_and_closed_segments_at_once_or_alone():
    for barrier, pool in ((threading.Barrier(3), ThreadPoolExecutor(8)), (None, None)):
        bad = FakeSegment(barrier, fails=True)
        good = [FakeSegment(barrier), FakeSegment(barrier)]
        closed = FakeSegment(None, fd=-1)  # its topic was deleted meanwhile: nothing to make durable
        assert _fsync_all([good[0], bad, closed, good[1]], pool) == [bad]
        assert all(s.flushed for s in good) and not closed.flushed
        if pool is not None:
            pool.shutdown()
