"""scan_records, the produce path's walk over a batch's records: it must see the same keys and timestamps as
decode_records, and refuse exactly the batches decode_records refuses, with the same error. Every test runs
twice: with the walk in C (freshet.format._scan, built at install) and with the walk in Python."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freshet.format import record_batch
from freshet.format.compression import compress
from freshet.format.errors import CorruptBatchError, FormatError
from freshet.format.record_batch import (
    HEADER_SIZE,
    TIMESTAMP_TYPE_FLAG,
    decode_records,
    encode_batch,
    read_header,
    scan_records,
)

_blob = st.none() | st.binary(max_size=300)
_headers = st.lists(st.tuples(st.text(max_size=8), _blob), max_size=3).map(tuple)
_record = st.tuples(_blob, _blob, st.integers(-(2**40), 2**40), _headers)
_batch = st.builds(
    lambda records, log_append, codec: _with_codec(
        encode_batch(records, log_append_time=1_700_000_000_000 if log_append else None), codec),
    st.lists(_record, min_size=1, max_size=12), st.booleans(), st.sampled_from([0, 1, 4]))


@pytest.fixture(autouse=True, params=["c", "python"])
def walk(request, monkeypatch):
    if request.param == "c":
        assert record_batch._scan is not None, "the C walk was not built (pip install -e . builds it)"
    else:
        monkeypatch.setattr(record_batch, "_scan", None)
    return request.param


def _with_codec(batch: bytes, codec: int) -> bytes:
    """The batch with its records section in ``codec`` (header fields kept: only the length and attributes)."""
    if codec == 0:
        return batch
    body = compress(codec, batch[HEADER_SIZE:])
    (attributes,) = struct.unpack_from(">h", batch, 21)
    head = bytearray(batch[:HEADER_SIZE])
    struct.pack_into(">i", head, 8, HEADER_SIZE - 12 + len(body))
    struct.pack_into(">h", head, 21, attributes | codec)
    return bytes(head) + body


def _decoded(batch: bytes):
    """What decode_records says: (count, keyless indexes, timestamps) or the format error it raises."""
    try:
        records = list(decode_records(batch))
    except FormatError as exc:
        return type(exc), str(exc)
    return len(records), [i for i, r in enumerate(records) if r.key is None], [r.timestamp for r in records]


def _scanned(batch: bytes):
    try:
        scan = scan_records(batch, timestamps=True)
    except FormatError as exc:
        return type(exc), str(exc)
    assert scan_records(batch).timestamps is None  # not asked for: not collected, the rest the same
    assert scan_records(batch)[:2] == scan[:2]
    return scan.count, scan.keyless, scan.timestamps


@settings(max_examples=300, deadline=None)
@given(_batch)
def test_the_scan_sees_the_keys_and_timestamps_decode_records_sees(batch):
    records = list(decode_records(batch))
    assert _scanned(batch) == (len(records), [i for i, r in enumerate(records) if r.key is None],
                               [r.timestamp for r in records])


@settings(max_examples=600, deadline=None)
@given(st.lists(_record, min_size=1, max_size=6), st.booleans(), st.data())
def test_a_mutated_batch_is_refused_exactly_when_decode_records_refuses_it(records, log_append, data):
    batch = bytearray(encode_batch(records, log_append_time=5 if log_append else None))
    body = len(batch) - HEADER_SIZE
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["byte", "cut", "insert", "count"]))
        at = HEADER_SIZE + data.draw(st.integers(0, max(body - 1, 0)))
        if kind == "byte" and at < len(batch):
            batch[at] = data.draw(st.integers(0, 255))
        elif kind == "cut":
            del batch[at:at + data.draw(st.integers(1, 4))]
        elif kind == "insert":
            batch[at:at] = data.draw(st.binary(min_size=1, max_size=4))
        else:
            struct.pack_into(">i", batch, 57, read_header(batch).records_count + data.draw(st.integers(-2, 2)))
        body = len(batch) - HEADER_SIZE
    struct.pack_into(">i", batch, 8, len(batch) - 12)  # the batch's length follows the mutation (as a client would)
    assert _scanned(bytes(batch)) == _decoded(bytes(batch))


def test_long_varints_a_negative_header_key_and_a_short_record_are_refused_as_decode_records_does():
    good = encode_batch([(b"k" * 200, b"v" * 70_000, 10**12, (("h" * 130, b"x" * 300),))])
    assert _scanned(good) == _decoded(good) == (1, [], [10**12])
    header_key_at = good.index(b"h" * 130) - 2  # the varint of the header key's length (130 -> 2 bytes)
    negative = bytearray(good)
    negative[header_key_at:header_key_at + 2] = b"\x03\x00"  # -2, then a header value of 0 bytes
    too_long = bytearray(good)
    too_long[HEADER_SIZE:HEADER_SIZE + 1] = b"\xff" * 11  # a record length of more than 64 bits
    cut = good[:header_key_at + 1]  # the records end inside the header key's length
    short = bytearray(good)
    short[HEADER_SIZE:HEADER_SIZE + 3] = bytes([short[HEADER_SIZE] - 2]) + short[HEADER_SIZE + 1:HEADER_SIZE + 3]
    for bad, message in ((negative, "record header key of negative size -2"), (too_long, "varint too long"),
                         (cut, "truncated varint"), (short, "record length does not match its fields")):
        assert _decoded(bytes(bad)) == (CorruptBatchError, message)
        assert _scanned(bytes(bad)) == (CorruptBatchError, message)


def test_a_varint_past_64_bits_is_left_to_the_python_walk_which_answers_as_decode_records():
    """A 10-byte varint whose last byte carries more than bit 63 fits Python's ints, not C's: the C walk hands the
    batch to the Python walk, whose answer is decode_records' (here: a record length far past the records)."""
    batch = bytearray(encode_batch([(b"k", b"v", 0)]))
    batch[HEADER_SIZE:HEADER_SIZE + 1] = b"\x80" * 9 + b"\x7e"  # the record length: bits past 64
    batch = bytes(batch)
    assert _scanned(batch) == _decoded(batch)
    if record_batch._scan is not None:
        assert record_batch._scan.walk(batch[HEADER_SIZE:], 1, False) is None


def test_a_log_append_time_batch_gives_every_record_its_max_timestamp():
    batch = encode_batch([(b"a", b"1", 5), (None, b"2", 9)], log_append_time=1234)
    assert read_header(batch).attributes & TIMESTAMP_TYPE_FLAG
    assert scan_records(batch, timestamps=True) == (2, [1], [1234, 1234])
