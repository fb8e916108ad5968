"""What a fetch gets, found from batch headers and the sparse index, equals a walk over every batch;
the region sent with sendfile holds those bytes even after the segment is deleted or rewritten."""

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from freshet.format.record_batch import encode_batch, iter_batches
from freshet.log import LogConfig, Partition


def reference(p: Partition, offset: int, max_bytes: int, limit: int) -> bytes:
    """Every batch of the partition in order; pick as the fetch rules say, segment by segment."""
    if offset >= limit:
        return b""  # nothing at or past the limit
    for segment in p.segments:
        if offset >= segment.next_offset:
            continue
        out, taken = [], 0
        for header, batch in iter_batches(segment.read(0, segment.size)):
            if header.base_offset >= limit:
                break
            if not out:
                if header.last_offset < offset:
                    continue
            elif taken + header.size > max_bytes:
                break
            out.append(bytes(batch))
            taken += header.size
        if out:
            return b"".join(out)
    return b""


@given(sizes=st.lists(st.integers(1, 8), min_size=1, max_size=80), value_bytes=st.integers(1, 120),
       segment_bytes=st.integers(300, 20_000), index_interval=st.integers(1, 600), data=st.data())
@settings(max_examples=150, deadline=None)
def test_region_equals_a_walk_over_every_batch(tmp_path_factory, sizes, value_bytes, segment_bytes, index_interval,
                                               data):
    directory = tmp_path_factory.mktemp("p")
    p = Partition(str(directory / "p0"), LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval))
    for n in sizes:
        p.append(encode_batch([(b"k", os.urandom(value_bytes), 1000 + i) for i in range(n)]))
    p.flush()
    for _ in range(10):
        offset = data.draw(st.integers(0, p.high_watermark))
        limit = data.draw(st.integers(offset, p.high_watermark))
        max_bytes = data.draw(st.integers(1, 2500))
        expected = reference(p, offset, max_bytes, limit)
        assert p.read(offset, max_bytes, limit) == expected
        region = p.read_region(offset, max_bytes, limit)
        assert (region.read() if region else b"") == expected
    p.close()


def test_a_region_outlives_its_segment(tmp_path):
    p = Partition(str(tmp_path / "p0"))
    p.append(encode_batch([(b"k", b"v" * 100, 1)]))
    p.flush()
    region = p.read_region(0, 1 << 20)
    expected = p.read(0, 1 << 20)
    p.segments[0].delete()  # as retention does
    assert region.read() == expected
    # asyncio's sendfile fallback: seek, then readinto in pieces
    region.seek(region.position + 10)
    buf = bytearray(50)
    assert region.readinto(buf) == 50 and bytes(buf) == expected[10:60]
    region.close()
    assert region.fd == -1
