"""A partition's leader-epoch cache: which leader epoch began at which offset (Kafka's LeaderEpochFileCache).

Every batch a leader appends carries its leader epoch (the batch header's partitionLeaderEpoch); this cache
keeps the first offset of each epoch, so a follower that comes back can ask the leader where the epoch it last
wrote in ended (OffsetForLeaderEpoch) and cut off whatever it holds past that (KIP-101 / KIP-279). It lives in
``leader-epoch-checkpoint`` beside the segments, in Kafka's format (version, count, then ``epoch start``
lines), replaced atomically and fsync'd on every change: changes are rare (a leader change, a truncation).

A one-node broker never writes it: the file appears once a partition is a replica in a cluster.
"""

from __future__ import annotations

import os
from bisect import bisect_right

CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, CHECKPOINT)
        self.entries: list[tuple[int, int]] = []  # (epoch, start offset), both increasing
        if os.path.exists(self.path):
            self.entries = _read(self.path)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Epoch ``epoch`` starts at ``start_offset`` (a leader taking over, or a follower meeting a batch of a
        newer epoch). An epoch not newer than the latest is ignored, as Kafka does; entries that would start at or
        after ``start_offset`` with a smaller epoch are dropped first (they never received a record)."""
        if epoch < 0 or epoch <= self.latest_epoch and self.entries:
            return
        kept = [(e, o) for e, o in self.entries if o < start_offset]
        self.entries = kept + [(epoch, start_offset)]
        self._save()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) answering OffsetForLeaderEpoch for ``epoch``: the latest epoch ends at the log end;
        an older one where the next epoch begins, named by the largest epoch at or below it; an epoch newer
        than any known, or any epoch on an empty cache, is (-1, -1)."""
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self.latest_epoch:
            return epoch, log_end_offset
        epochs = [e for e, _ in self.entries]
        i = bisect_right(epochs, epoch)  # the first entry with a larger epoch
        if i == len(self.entries):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        higher_start = self.entries[i][1]
        if i == 0:
            return epoch, higher_start
        return self.entries[i - 1][0], higher_start

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was cut at ``end_offset``: epochs starting there or later are forgotten."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def clear(self) -> None:
        if self.entries:
            self.entries = []
            self._save()

    def _save(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"0\n{len(self.entries)}\n")
            for epoch, offset in self.entries:
                f.write(f"{epoch} {offset}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(os.path.dirname(self.path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _read(path: str) -> list[tuple[int, int]]:
    with open(path) as f:
        lines = [line.split() for line in f.read().splitlines() if line.strip()]
    if len(lines) < 2 or lines[0] != ["0"]:
        raise ValueError(f"{path}: not a version-0 leader-epoch checkpoint")
    count = int(lines[1][0])
    entries = [(int(e), int(o)) for e, o in lines[2:2 + count]]
    if len(entries) != count:
        raise ValueError(f"{path}: {count} entries announced, {len(entries)} found")
    return entries
