"""The columnar range reader's decoding, without a broker: record sets built by the format's own encoder
(freshet.format.record_batch), compressed with each codec, with control batches and aborted transactions,
decoded by the C decoder into Arrow and compared with the format's Python decoder record by record. Malformed
record sets raise ReadError and leave the columns as they were."""

import struct

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

from freshet.client.columnar import (
    Records,
    RangeReader,
    ReadError,
    ReadRange,
    _AbortedTransactions,
    _Position,
    decoder,
)
from freshet.format.compression import compress as freshet_compress
from freshet.format.record_batch import decode_records, encode_batch

SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])
T0 = 1_700_000_000_000


def compress(data: bytes, codec: int) -> bytes:
    return freshet_compress(codec, data)


def xerial(data: bytes) -> bytes:
    """Snappy in the Java clients' xerial framing: a 16-byte header, then length-prefixed blocks."""
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for i in range(0, len(data), 100):
        block = bytes(cramjam.snappy.compress_raw(data[i:i + 100]))
        out += struct.pack(">i", len(block)) + block
    return out


def batch(records, base_offset=0, codec=0, attributes=0, producer_id=-1, deltas=None, framing=None) -> bytes:
    raw = encode_batch(records, base_offset, producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                       attributes=attributes, offset_deltas=deltas)
    if not codec:
        return raw
    body = framing(raw[61:]) if framing else compress(raw[61:], codec)
    header = bytearray(raw[:61])
    struct.pack_into(">i", header, 8, 49 + len(body))
    struct.pack_into(">h", header, 21, attributes | codec)
    return bytes(header) + body


def control(base_offset, producer_id, abort: bool) -> bytes:
    return encode_batch([(struct.pack(">hh", 0, 0 if abort else 1), struct.pack(">hi", 0, 0), T0)], base_offset,
                        producer_id=producer_id, producer_epoch=0, attributes=0x30)


def read(record_set: bytes, start=0, end=10**9, *, aborted=None, committed=True, headers=True):
    schema = SCHEMA if headers else pa.schema(list(SCHEMA)[:7])
    reader = RangeReader("127.0.0.1:1", [], schema, options={
        "isolation.level": "read_committed" if committed else "read_uncommitted"})
    position = _Position(ReadRange("t", 3, start, end), decoder().Columns(headers=headers))
    listed = None
    if aborted and committed:
        listed = _AbortedTransactions([type("T", (), {"producer_id": p, "first_offset": o}) for p, o in aborted])
    reader._decode(position, record_set, listed)
    taken = position.columns.take()
    arrow = reader._record_batch(position.range, taken)
    # the same buffers as Python lists (what the event store's bulk reads take) hold the same records
    plain = Records.of(position.range, taken)
    assert (plain.keys, plain.values, plain.offsets) == (arrow.column("key").to_pylist(),
                                                        arrow.column("value").to_pylist(),
                                                        arrow.column("offset").to_pylist())
    assert plain.timestamps_ms == [int(t.timestamp() * 1000) if t is not None else None
                                   for t in arrow.column("timestamp").to_pylist()]
    return position, arrow


def expected(record_set: bytes, start=0, end=10**9):
    out, pos = [], 0
    while pos < len(record_set):
        size = struct.unpack_from(">i", record_set, pos + 8)[0] + 12
        attributes = struct.unpack_from(">h", record_set, pos + 21)[0]
        for r in decode_records(bytes(record_set[pos:pos + size])) if not attributes & 0x20 else ():
            if start <= r.offset < end:
                out.append({"key": r.key, "value": r.value, "topic": "t", "partition": 3, "offset": r.offset,
                            "timestamp": r.timestamp, "timestampType": 0,
                            "headers": [{"key": k, "value": v} for k, v in r.headers]})
        pos += size
    return out


def rows(record_batch):
    out = record_batch.to_pylist()
    for row in out:
        row["timestamp"] = int(row["timestamp"].timestamp() * 1000)
    return out


blobs = st.one_of(st.none(), st.binary(max_size=40))
records = st.lists(st.tuples(blobs, blobs, st.integers(0, 10**6),
                             st.lists(st.tuples(st.text(max_size=8), blobs), max_size=3).map(tuple)),
                   min_size=1, max_size=12)


def test_the_decoder_is_built():
    columns = decoder().Columns(headers=True)
    assert columns.count == 0 and columns.nbytes == 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(records, st.integers(0, 4), st.integers(0, 3)), min_size=1, max_size=6),
       st.integers(0, 60), st.integers(0, 80))
def test_record_sets_decode_as_the_logs_own_decoder_reads_them(batches, start, length):
    """Batches with random keys, values (None too), timestamps and headers, each uncompressed or in one of
    the four codecs, with gaps between them (compaction), read in a random [start, end)."""
    record_set, offset = b"", 0
    for recs, codec, gap in batches:
        recs = [(k, v, T0 + ts, h) for k, v, ts, h in recs]
        record_set += batch(recs, offset, codec)
        offset += len(recs) + gap
    position, result = read(record_set, start, start + length)
    assert rows(result) == [{**r, "timestamp": r["timestamp"]} for r in expected(record_set, start, start + length)]
    assert result.schema == SCHEMA
    # the position is past the last batch, or at or past the range's end
    last = offset - batches[-1][2]
    assert position.offset == max(last, start) if start + length > last else position.offset >= start + length


def test_a_partial_batch_at_the_end_of_a_fetch_waits_for_the_next():
    whole = batch([(b"k", b"v%d" % i, T0) for i in range(5)], 0)
    second = batch([(b"k", b"w%d" % i, T0) for i in range(5)], 5)
    position, result = read(whole + second[:40])
    assert result.column("offset").to_pylist() == [0, 1, 2, 3, 4] and position.offset == 5


def test_compaction_gaps_move_the_position_past_the_batch():
    # offsets 0, 3 and 9 left of a batch whose last offset delta is 9
    record_set = batch([(b"a", b"1", T0), (b"b", b"2", T0), (b"c", b"3", T0)], 100, deltas=[0, 3, 9])
    position, result = read(record_set, 100, 200)
    assert result.column("offset").to_pylist() == [100, 103, 109] and position.offset == 110


def test_log_append_time_batches_carry_the_brokers_time():
    record_set = batch([(b"a", b"1", T0), (b"b", b"2", T0 + 5)], 0, attributes=0x08)
    struct.pack_into(">q", (buf := bytearray(record_set)), 35, T0 + 777)  # max_timestamp: the append time
    _position, result = read(bytes(buf))
    assert [r["timestamp"] for r in rows(result)] == [T0 + 777, T0 + 777]
    assert result.column("timestampType").to_pylist() == [1, 1]


def test_snappy_in_xerial_framing():
    recs = [(b"k%d" % i, b"value %d" % i * 20, T0 + i) for i in range(30)]
    record_set = batch(recs, 0, codec=2, framing=xerial)
    assert rows(read(record_set)[1]) == expected(batch(recs, 0))


def test_aborted_transactions_are_skipped_under_read_committed_only():
    """Producer 7's transaction (offsets 0-2) is aborted, producer 8's (3-4) committed; their markers
    follow. A plain batch at 7. Under read_committed the aborted records are not read."""
    record_set = (batch([(None, b"a0", T0), (None, b"a1", T0), (None, b"a2", T0)], 0, attributes=0x10, producer_id=7)
                  + batch([(None, b"c3", T0), (None, b"c4", T0)], 3, attributes=0x10, producer_id=8, codec=4)
                  + control(5, 7, abort=True) + control(6, 8, abort=False)
                  + batch([(None, b"p7", T0)], 7))
    position, committed = read(record_set, aborted=[(7, 0)])
    assert committed.column("value").to_pylist() == [b"c3", b"c4", b"p7"] and position.offset == 8
    _position, uncommitted = read(record_set, aborted=[(7, 0)], committed=False)
    assert uncommitted.column("value").to_pylist() == [b"a0", b"a1", b"a2", b"c3", b"c4", b"p7"]


def test_a_producers_later_transaction_is_read_after_its_abort_marker():
    record_set = (batch([(None, b"x", T0)], 0, attributes=0x10, producer_id=7) + control(1, 7, abort=True)
                  + batch([(None, b"y", T0)], 2, attributes=0x10, producer_id=7) + control(3, 7, abort=False))
    _position, result = read(record_set, aborted=[(7, 0)])
    assert result.column("value").to_pylist() == [b"y"]


def test_without_headers_the_header_column_is_left_out():
    record_set = batch([(b"k", b"v", T0, (("h", b"1"),))], 0)
    _position, result = read(record_set, headers=False)
    assert result.schema.names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_malformed_record_set_raises_and_leaves_the_columns_as_they_were(data):
    """Any byte of a record set changed, or the set cut short: the read raises ReadError or reads what is
    well-formed; it never crashes, and a failing batch adds nothing."""
    recs = [(b"key%d" % i, b"value%d" % i, T0 + i, (("h", b"x"),) if i % 2 else ()) for i in range(6)]
    record_set = bytearray(batch(recs, 0) + batch(recs, 6, codec=data.draw(st.integers(0, 4))))
    for _ in range(data.draw(st.integers(1, 4))):
        record_set[data.draw(st.integers(0, len(record_set) - 1))] = data.draw(st.integers(0, 255))
    record_set = bytes(record_set[:data.draw(st.integers(0, len(record_set)))])
    position = _Position(ReadRange("t", 3, 0, 10**9), decoder().Columns(headers=True))
    reader = RangeReader("127.0.0.1:1", [], SCHEMA)
    try:
        reader._decode(position, record_set, None)
    except ReadError:
        pass
    result = reader._record_batch(position.range, position.columns.take())
    result.validate(full=False)
    offsets = result.column("offset").to_pylist()
    assert offsets == sorted(offsets)


def test_a_record_whose_length_runs_past_its_batch_is_refused_whole():
    good = batch([(b"k", b"v", T0)] * 3, 0)
    bad = bytearray(batch([(b"k", b"v", T0)] * 3, 3))
    bad[61] = 0x7E  # the first record's length varint: 63, past the batch's end
    position = _Position(ReadRange("t", 3, 0, 10**9), decoder().Columns(headers=True))
    reader = RangeReader("127.0.0.1:1", [], SCHEMA)
    with pytest.raises(ReadError, match="corrupt record batch at offset 3"):
        reader._decode(position, good + bytes(bad), None)
    assert position.columns.count == 0 and position.offset == 0  # the call is taken back whole


def test_offsets_that_go_back_within_a_batch_are_refused():
    record_set = batch([(b"k", b"a", T0), (b"k", b"b", T0), (b"k", b"c", T0)], 0, deltas=[0, 2, 1])
    with pytest.raises(ReadError, match="offsets do not rise within the batch"):
        read(record_set)
