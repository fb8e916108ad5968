"""Record header keys: bytes that are not UTF-8 decode (Kafka accepts them) and encode back to the same bytes,
so that what reads records (the produce path's walk, the cleaner rewriting batches) neither fails nor changes them;
records that do not hold together are MalformedRecordError on the produce path, and decode_records raises nothing but
a FormatError on them."""

import pytest

from freshet.format.errors import FormatError, MalformedRecordError
from freshet.format.record_batch import decode_records, encode_batch, scan_records
from freshet.testing.fuzz import record_level_batches


def test_a_header_key_that_is_not_utf8_round_trips_byte_for_byte():
    batch = encode_batch([(b"k", b"v", 5, (("\udcff\udcfekey", b"hv"), ("ok", None)))])
    assert b"\xff\xfekey" in batch
    (record,) = decode_records(batch)
    assert record.headers == (("\udcff\udcfekey", b"hv"), ("ok", None))
    assert encode_batch([(record.key, record.value, record.timestamp, record.headers)]) == batch


@pytest.mark.parametrize("name", [n for n, (_, code) in record_level_batches(1).items() if code != 0])
def test_records_that_do_not_hold_together_are_malformed_records(name):
    batch, _code = record_level_batches(1)[name]
    with pytest.raises(MalformedRecordError):
        scan_records(batch)
    try:
        list(decode_records(batch))
    except FormatError:
        pass
