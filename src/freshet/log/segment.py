"""One segment of a partition's log: a file of record batches plus its sparse indexes.

The file ``<base_offset:020d>.log`` holds batches back to back, exactly as produced. Two
in-memory indexes point into it, one entry every ``index_interval_bytes``:

- the offset index: batch base offset -> file position (bisect, then a short header walk);
- the time index: the largest timestamp seen so far -> the first offset after it.

Both are rebuilt from the batch headers when a segment is opened: the log file is the only
truth on disk, so a crash can never leave an index that disagrees with it.
"""

from __future__ import annotations

import logging
import mmap
import os
import time
from array import array
from bisect import bisect_left, bisect_right

from freshet.format.record_batch import HEADER_SIZE, BatchHeader, read_header, scan_valid_prefix

from .errors import StorageError

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{LOG_SUFFIX}"


_WINDOW = 8192  # bytes read at a time while walking batch headers


class FileRegion:
    """A byte range of a segment file, to send without reading it into memory (``os.sendfile``).

    It holds a duplicate of the segment's file descriptor, so the bytes stay what they were even if
    retention deletes the file or compaction replaces it before they are sent. Close it once sent
    (it closes itself when let go). ``seek``/``readinto`` serve asyncio's sendfile fallback
    (for transports that cannot sendfile, such as TLS).
    """

    __slots__ = ("fd", "position", "size", "_cursor")

    def __init__(self, fd: int, position: int, size: int) -> None:
        self.fd = os.dup(fd)
        self.position = position
        self.size = size
        self._cursor = position

    def __len__(self) -> int:
        return self.size

    def fileno(self) -> int:
        return self.fd

    def read(self) -> bytes:
        """The whole region's bytes."""
        return os.pread(self.fd, self.size, self.position)

    def __bytes__(self) -> bytes:
        return self.read()

    def seek(self, position: int, whence: int = 0) -> int:
        self._cursor = position
        return position

    def readinto(self, buffer) -> int:
        end = self.position + self.size
        n = os.preadv(self.fd, [memoryview(buffer)[: max(0, end - self._cursor)]], self._cursor)
        self._cursor += n
        return n

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()


class Segment:
    """An append-only file of batches whose offsets start at ``base_offset``."""

    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int = 4096) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.path = os.path.join(directory, segment_file_name(base_offset))
        self.index_interval_bytes = index_interval_bytes
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.created_at = time.time()
        self.dirty = False
        self._reset_indexes()

    def _reset_indexes(self) -> None:
        self.size = 0
        self.next_offset = self.base_offset  # one past the last offset stored here
        self.max_timestamp = -1
        self.batch_count = 0
        self._index_offsets = array("q")
        self._index_positions = array("q")
        self._time_values = array("q")
        self._time_offsets = array("q")
        self._bytes_since_index = self.index_interval_bytes  # first batch always gets an entry
        self._bytes_since_time_index = self.index_interval_bytes

    # -- opening and recovery -----------------------------------------------------------

    def recover(self, check_crc: bool = True) -> tuple[list[tuple[int, BatchHeader]], int]:
        """Rebuild the indexes from the file; cut a torn or corrupt tail.

        Returns (position, header) of every valid batch (for the producer-state and transaction
        rebuild) and the number of bytes cut off the end (0 for a clean segment).
        """
        file_size = os.fstat(self.fd).st_size
        headers: list[tuple[int, BatchHeader]] = []
        found, valid = self._scan(file_size, check_crc)
        for position, header in found:
            self._index(header, position)
            headers.append((position, header))
        cut = file_size - valid
        if cut:
            log.warning(
                "segment %s: cut %d bytes of torn or corrupt tail after offset %d",
                self.path, cut, self.next_offset - 1,
            )
            os.ftruncate(self.fd, valid)
            os.fsync(self.fd)
        self.size = valid
        try:
            self.created_at = os.stat(self.path).st_mtime if self.batch_count else time.time()
        except OSError:
            pass
        return headers, cut

    def _scan(self, size: int, check_crc: bool) -> tuple[list[tuple[int, BatchHeader]], int]:
        if not size:
            return [], 0
        with mmap.mmap(self.fd, size, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            try:
                return scan_valid_prefix(view, check_crc=check_crc)
            finally:
                view.release()

    def batch_headers(self) -> list[tuple[int, BatchHeader]]:
        """(position, header) of every batch written here."""
        return self._scan(self.size, False)[0]

    def truncate_to(self, offset: int) -> None:
        """Cut the file before the batch that holds ``offset`` (or the first after it), fsync'd, and rebuild
        the indexes (a follower removing a suffix its leader does not have)."""
        position = self.position_for(offset)
        while position + HEADER_SIZE <= self.size:
            header = read_header(os.pread(self.fd, HEADER_SIZE, position))
            if header.last_offset >= offset:
                break
            position += header.size
        if position >= self.size:
            return
        os.ftruncate(self.fd, position)
        os.fsync(self.fd)
        self._reset_indexes()
        self.recover(check_crc=False)

    # -- writing ------------------------------------------------------------------------

    def _index(self, header: BatchHeader, position: int) -> None:
        if self._bytes_since_index >= self.index_interval_bytes:
            self._index_offsets.append(header.base_offset)
            self._index_positions.append(position)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            if self._bytes_since_time_index >= self.index_interval_bytes:
                self._time_values.append(header.max_timestamp)
                self._time_offsets.append(header.base_offset)
                self._bytes_since_time_index = 0
        self._bytes_since_time_index += header.size
        self.next_offset = header.last_offset + 1
        self.batch_count += 1

    def append(self, data: bytes | bytearray, headers: list[BatchHeader]) -> None:
        """Write batches whose offsets are already assigned. ``headers`` describe ``data`` in order."""
        position = self.size
        try:
            written = os.pwrite(self.fd, data, position)
        except OSError as exc:
            os.ftruncate(self.fd, position)
            raise StorageError(f"write to {self.path} failed: {exc.strerror}") from exc
        if written != len(data):
            os.ftruncate(self.fd, position)
            raise StorageError(f"short write to {self.path}")
        for header in headers:
            self._index(header, position)
            position += header.size
        self.size = position
        self.dirty = True

    def flush(self) -> None:
        """fsync the file (called from the group-commit thread)."""
        try:
            os.fdatasync(self.fd)
        except OSError as exc:
            raise StorageError(f"fsync of {self.path} failed: {exc.strerror}") from exc

    # -- reading ------------------------------------------------------------------------

    def position_for(self, offset: int) -> int:
        """File position of an indexed batch at or before ``offset`` (start of a header walk)."""
        i = bisect_right(self._index_offsets, offset) - 1
        return self._index_positions[i] if i >= 0 else 0

    def offset_for_time(self, timestamp: int) -> int:
        """Where to start a header walk for the first batch whose max timestamp is >= ``timestamp``.

        Entries hold the running maximum timestamp, so every batch before the entry found
        here has a smaller maximum: the answer lies after it.
        """
        j = bisect_left(self._time_values, timestamp)
        return self._time_offsets[j - 1] if j > 0 else self.base_offset

    def locate(self, offset: int, max_bytes: int, limit: int) -> tuple[int, int] | None:
        """The byte range [start, end) of whole batches a fetch at ``offset`` gets, or None.

        It starts with the batch that holds ``offset`` (whole, even if larger than ``max_bytes``:
        a consumer always progresses) and takes the batches after it while they fit in
        ``max_bytes`` and begin below ``limit``. Only batch headers are read: a few small reads,
        the sparse index jumping over the middle of a large range.
        """
        size = self.size
        fd = self.fd
        window_pos = 0
        window = b""

        def header_at(position: int) -> BatchHeader | None:
            nonlocal window_pos, window
            if not (window_pos <= position and position + HEADER_SIZE <= window_pos + len(window)):
                if position + HEADER_SIZE > size:
                    return None
                window = os.pread(fd, _WINDOW, position)
                window_pos = position
                if len(window) < HEADER_SIZE:
                    return None
            return read_header(window, position - window_pos)

        position = self.position_for(offset)
        while True:
            header = header_at(position)
            if header is None or header.base_offset >= limit:
                return None
            if header.last_offset >= offset:
                break
            position += header.size
        start = position
        end = start + header.size
        budget_end = start + max_bytes
        # every indexed position is a batch start: jump to the last one that still fits and lies below limit
        j = min(bisect_left(self._index_offsets, limit), bisect_right(self._index_positions, budget_end)) - 1
        if j >= 0 and self._index_positions[j] > end:
            end = self._index_positions[j]
        while True:
            header = header_at(end)
            if header is None or header.base_offset >= limit or end + header.size > budget_end:
                break
            end += header.size
        return start, end

    def read(self, position: int, size: int) -> bytes:
        size = min(size, self.size - position)
        if size <= 0:
            return b""
        return os.pread(self.fd, size, position)

    def replace_contents(self, batches: list[bytes]) -> None:
        """Swap this segment's file for one holding ``batches`` (compaction), crash-safely:
        the new file is written and fsync'd beside the old one, then renamed over it."""
        cleaned = self.path + ".cleaned"
        with open(cleaned, "wb") as f:
            for batch in batches:
                f.write(batch)
            f.flush()
            os.fsync(f.fileno())
        self.close()
        os.replace(cleaned, self.path)
        created_at = self.created_at
        self.__init__(self.directory, self.base_offset, self.index_interval_bytes)  # type: ignore[misc]
        self.recover(check_crc=False)
        self.created_at = created_at

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"Segment({self.path!r}, offsets {self.base_offset}..{self.next_offset - 1}, {self.size} B)"
