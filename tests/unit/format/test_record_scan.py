"""scan_records, the produce path's walk over a batch's records: it sees the keys, timestamps and the largest
timestamp decode_records sees, and it refuses, as Kafka's leader does, records that do not hold together even when
the batch's CRC-32C holds (each malformed shape below is built by hand and sealed with a right CRC). Every test runs
twice: with the walk in C (freshet.format._scan, built at install) and with the walk in Python."""

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freshet.format import record_batch
from freshet.format.compression import compress
from freshet.format.errors import FormatError, MalformedRecordError
from freshet.format.record_batch import (
    HEADER_SIZE,
    MAGIC,
    TIMESTAMP_TYPE_FLAG,
    decode_records,
    encode_batch,
    read_header,
    scan_batches,
    scan_records,
    validate_batches,
)
from freshet.format.varint import write_varint

_blob = st.none() | st.binary(max_size=300)
_headers = st.lists(st.tuples(st.text(max_size=8), _blob), max_size=3).map(tuple)
_record = st.tuples(_blob, _blob, st.integers(-(2**40), 2**40), _headers)
_batch = st.builds(
    lambda records, log_append, codec: _with_codec(
        encode_batch(records, log_append_time=1_700_000_000_000 if log_append else None), codec),
    st.lists(_record, min_size=1, max_size=12), st.booleans(), st.sampled_from([0, 1, 2, 3, 4]))


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
    return _sealed(bytes(head) + body)


def _sealed(batch: bytes | bytearray) -> bytes:
    """``batch`` with its CRC-32C right again: only the records' walk can find what is wrong inside."""
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def _scanned(batch: bytes):
    """What scan_records says: (count, keyless, timestamps, max timestamp) or (error type, message, index)."""
    try:
        scan = scan_records(batch, timestamps=True)
    except FormatError as exc:
        return type(exc), str(exc), getattr(exc, "index", None)
    assert scan_records(batch).timestamps is None  # not asked for: not collected, the rest the same
    assert scan_records(batch)._replace(timestamps=scan.timestamps) == scan
    return tuple(scan)


@settings(max_examples=300, deadline=None)
@given(_batch)
def test_the_scan_sees_the_keys_and_timestamps_decode_records_sees(batch):
    validate_batches(batch)
    records = list(decode_records(batch))
    header = read_header(batch)
    largest = (header.max_timestamp if header.attributes & TIMESTAMP_TYPE_FLAG
               else max(r.timestamp for r in records))
    assert _scanned(batch) == (len(records), [i for i, r in enumerate(records) if r.key is None],
                               [r.timestamp for r in records], largest)


@settings(max_examples=600, deadline=None)
@given(st.lists(_record, min_size=1, max_size=6), st.booleans(), st.data())
def test_a_mutated_batch_the_scan_accepts_decodes_and_both_walks_answer_alike(records, log_append, data):
    """Whatever bytes the records section holds (the CRC made right), the C and the Python walks give the same
    answer, to the message and the record's index; a batch the scan accepts decode_records reads whole."""
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
            count = read_header(batch).records_count + data.draw(st.integers(-2, 2))
            struct.pack_into(">i", batch, 23, count - 1)  # the last offset delta and the count agree
            struct.pack_into(">i", batch, 57, count)
        body = len(batch) - HEADER_SIZE
    struct.pack_into(">i", batch, 8, len(batch) - 12)  # the batch's length follows the mutation (as a client would)
    batch = _sealed(batch)
    scanned = _scanned(batch)
    if record_batch._scan is not None:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(record_batch, "_scan", None)
            assert _scanned(batch) == scanned
    if scanned[0] is MalformedRecordError:
        return
    decoded = list(decode_records(batch))
    assert (len(decoded), [i for i, r in enumerate(decoded) if r.key is None]) == scanned[:2]


def _record(index: int = 0, key: bytes | None = b"k", value: bytes | None = b"v", ts_delta: int = 0,
            headers: tuple = (), **lies) -> bytes:
    """One record as a client writes it; ``lies`` replace a field's varint with another value: length,
    offset_delta, key_size, value_size, header_count, header_key_size, header_value_size (the first header's)."""
    body = bytearray([0])
    write_varint(body, ts_delta)
    write_varint(body, lies.get("offset_delta", index))
    for field, data in (("key_size", key), ("value_size", value)):
        write_varint(body, lies.get(field, -1 if data is None else len(data)))
        body += data or b""
    write_varint(body, lies.get("header_count", len(headers)))
    for n, (hk, hv) in enumerate(headers):
        write_varint(body, lies.get("header_key_size", len(hk)) if n == 0 else len(hk))
        body += hk
        write_varint(body, (lies.get("header_value_size", -1 if hv is None else len(hv)) if n == 0
                            else -1 if hv is None else len(hv)))
        body += hv or b""
    out = bytearray()
    write_varint(out, lies.get("length", len(body)))
    return bytes(out + body)


def _raw_batch(records: list[bytes], count: int | None = None, max_timestamp: int = 1000) -> bytes:
    """A batch around ``records`` exactly as given, its count (and last offset delta) as given, its CRC right."""
    count = len(records) if count is None else count
    after_crc = struct.pack(">hiqqqhii", 0, count - 1, 1000, max_timestamp, -1, -1, -1, count) + b"".join(records)
    return _sealed(struct.pack(">qiiBI", 0, 9 + len(after_crc), 0, MAGIC, 0) + after_crc)


_HEADER = ((b"trace", b"abc"),)

# name -> (batch, the message, the record at fault): each with its CRC right, each refused
MALFORMED = {
    "record length past the batch": (
        _raw_batch([_record(0), _record(1, length=9)]), "record 1: its length 9 overruns the 8 bytes left", 1),
    "record length short of its fields": (
        _raw_batch([_record(0, length=5), _record(1)]), "record 0: value of 1 bytes overruns its record", 0),
    "record length beyond its fields": (
        _raw_batch([_record(0, length=9), _record(1)]), "record 0: its fields take 8 bytes, its length says 9", 0),
    "records_count below the records present": (
        _raw_batch([_record(0), _record(1)], count=1), "9 bytes after the last of the batch's 1 records", None),
    "records_count above the records present": (
        _raw_batch([_record(0), _record(1)], count=3), "record 2 runs past the end of the batch", 2),
    "key of negative size -2": (_raw_batch([_record(0, key=None, key_size=-2)]), "record 0: key of negative size -2", 0),
    "value of negative size -5": (
        _raw_batch([_record(0), _record(1, value=None, value_size=-5)]), "record 1: value of negative size -5", 1),
    "key past its record": (
        _raw_batch([_record(0, key=b"kk", key_size=40), _record(1)]), "record 0: key of 40 bytes overruns", 0),
    "value past its record": (
        _raw_batch([_record(0, value=b"vvv", value_size=30)]), "record 0: value of 30 bytes overruns", 0),
    "negative header count": (
        _raw_batch([_record(0, header_count=-1)]), "record 0: header count -1 does not fit its record", 0),
    "header count past the record": (
        _raw_batch([_record(0, headers=_HEADER, header_count=50), _record(1)]),
        "record 0: header count 50 does not fit its record", 0),
    "header key of negative size": (
        _raw_batch([_record(0, headers=_HEADER, header_key_size=-1)]), "record 0: header key of negative size -1", 0),
    "header key past its record": (
        _raw_batch([_record(0, headers=_HEADER, header_key_size=60)]), "record 0: header key of 60 bytes overruns", 0),
    "header value of negative size -3": (
        _raw_batch([_record(0, headers=_HEADER, header_value_size=-3)]),
        "record 0: header value of negative size -3", 0),
    "header value past its record": (
        _raw_batch([_record(0, headers=_HEADER, header_value_size=70)]),
        "record 0: header value of 70 bytes overruns", 0),
    "offset deltas out of sequence": (
        _raw_batch([_record(0), _record(1, offset_delta=2), _record(2)]), "record 1: offset delta 2, expected 1", 1),
    "offset delta past the header's last offset delta": (
        _raw_batch([_record(0), _record(1, offset_delta=7)]), "record 1: offset delta 7, expected 1", 1),
    "varint of more than 10 bytes": (
        _raw_batch([b"\xff" * 11 + _record(0)]), "record 0: varint too long", 0),
    "records cut inside a varint": (_raw_batch([b"\x80"]), "record 0 runs past the end of the batch", 0),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_records_that_do_not_hold_together_are_refused_with_the_record_at_fault(name):
    batch, message, index = MALFORMED[name]
    validate_batches(batch)  # the header, its length, counts and CRC-32C all hold
    refused = _scanned(batch)
    assert refused[0] is MalformedRecordError and refused[2] == index
    assert refused[1].startswith(message)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
@pytest.mark.parametrize("name", ["record length past the batch", "records_count below the records present",
                                  "value of negative size -5", "offset deltas out of sequence"])
def test_a_compressed_batch_is_walked_decompressed_and_refused_alike(name, codec):
    batch, message, index = MALFORMED[name]
    refused = _scanned(_with_codec(batch, codec))
    assert (refused[0], refused[2]) == (MalformedRecordError, index) and refused[1].startswith(message)


def test_a_null_key_a_null_value_and_a_null_header_value_are_accepted():
    batch = _raw_batch([_record(0, key=None), _record(1, value=None, headers=((b"h", None),)), _record(2, key=b"")])
    assert _scanned(batch)[:2] == (3, [0])


def test_a_varint_past_64_bits_is_left_to_the_python_walk_which_answers_alike():
    """A 10-byte varint whose last byte carries more than bit 63 fits Python's ints, not C's: the C walk hands the
    batch to the Python walk (here: a record length far past the records)."""
    batch = bytearray(encode_batch([(b"k", b"v", 0)]))
    batch[HEADER_SIZE:HEADER_SIZE + 1] = b"\x80" * 9 + b"\x7e"  # the record length: bits past 64
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    batch = _sealed(batch)
    refused = _scanned(batch)
    assert refused[0] is MalformedRecordError and refused[1].startswith("record 0: its length ")
    if record_batch._scan is not None:
        assert record_batch._scan.check(batch[HEADER_SIZE:], 1, False) is None


def test_the_largest_timestamp_is_the_records_not_the_headers():
    batch = _raw_batch([_record(0, ts_delta=5), _record(1, ts_delta=-3), _record(2, ts_delta=2)], max_timestamp=1)
    assert _scanned(batch) == (3, [], [1005, 997, 1002], 1005)


def test_a_log_append_time_batch_gives_every_record_its_max_timestamp():
    batch = encode_batch([(b"a", b"1", 5), (None, b"2", 9)], log_append_time=1234)
    assert read_header(batch).attributes & TIMESTAMP_TYPE_FLAG
    assert scan_records(batch, timestamps=True) == (2, [1], [1234, 1234], 1234)


def test_scan_batches_walks_each_batch_of_a_request_as_scan_records_does():
    batches = [encode_batch([(b"a", b"1", 5), (None, b"2", 9)]),
               _with_codec(encode_batch([(None, b"3", 7, (("h", b"x"),))]), 4),
               _raw_batch([_record(0, ts_delta=4), _record(1, key=None)], max_timestamp=1)]
    request = b"".join(batches)
    assert scan_batches(request, validate_batches(request), timestamps=True) == [
        scan_records(b, timestamps=True) for b in batches]
    bad = request + MALFORMED["offset deltas out of sequence"][0]
    with pytest.raises(MalformedRecordError, match="record 1: offset delta 2") as refused:
        scan_batches(bad, validate_batches(bad))
    assert refused.value.index == 1


def test_an_lz4_frame_of_linked_blocks_is_refused_as_kafka_refuses_it():
    """Kafka's LZ4 reader takes only independent blocks (what librdkafka and Kafka's producers write): a batch in
    linked blocks would be stored and then break every Java consumer."""
    import cramjam

    batch = encode_batch([(b"k", b"v" * 100, 5)])
    linked = bytearray(_with_codec(batch, 3))
    linked[HEADER_SIZE:] = bytes(cramjam.lz4.compress(batch[HEADER_SIZE:]))  # cramjam's default: linked blocks
    struct.pack_into(">i", linked, 8, len(linked) - 12)
    refused = _scanned(_sealed(linked))
    assert refused[0] is MalformedRecordError and "linked blocks" in refused[1]
    assert _scanned(_with_codec(batch, 3))[:2] == (1, [])  # independent blocks (compress): accepted
