"""Syslog parsing (RFC 5424's and RFC 3164's own examples) and RFC 6587 framing, plus fuzzing: any input
gives a record or a count, never an exception."""

from hypothesis import given, settings
from hypothesis import strategies as st

from freshet.ingest.syslog import TcpFramer, parse

NOW = 1_700_000_000_000  # 2023-11-14


def test_rfc5424_examples():
    e = parse("<34>1 2003-10-11T22:14:15.003Z mymachine.example.com su - ID47 - \ufeff'su root' failed", NOW)
    assert (e["format"], e["facility_name"], e["severity_name"]) == ("rfc5424", "auth", "crit")
    assert (e["hostname"], e["app_name"], e["procid"], e["msgid"]) == ("mymachine.example.com", "su", None, "ID47")
    assert e["timestamp_ms"] == 1065910455003 and e["message"] == "'su root' failed"  # the BOM is not the message's
    e = parse('<165>1 2003-10-11T22:14:15.003Z host evntslog - ID47 [exampleSDID@32473 iut="3" eventSource='
              '"Application"][examplePriority@32473 class="high" note="a \\"quoted\\" \\] bracket"] An event', NOW)
    assert e["structured_data"] == {"exampleSDID@32473": {"iut": "3", "eventSource": "Application"},
                                    "examplePriority@32473": {"class": "high", "note": 'a "quoted" ] bracket'}}
    assert e["message"] == "An event" and (e["facility"], e["severity"]) == (20, 5)
    e = parse("<165>1 2003-08-24T05:14:15.000003-07:00 192.0.2.1 myproc 8710 - - %% It's time", NOW)
    assert e["timestamp_ms"] == 1061727255000 and e["procid"] == "8710" and e["structured_data"] is None


def test_rfc3164_lines_with_and_without_hostname_and_pid():
    e = parse("<34>Oct 11 22:14:15 mymachine su: 'su root' failed for lonvick on /dev/pts/8", NOW)
    assert (e["format"], e["hostname"], e["app_name"], e["message"]) == (
        "rfc3164", "mymachine", "su", "'su root' failed for lonvick on /dev/pts/8")
    assert e["timestamp_ms"] == 1697062455000  # no year in the line: the year that puts it nearest arrival
    e = parse("<13>Feb  5 17:32:18 10.0.0.99 nginx[123]: GET / 200", NOW)
    assert (e["hostname"], e["app_name"], e["procid"], e["message"]) == ("10.0.0.99", "nginx", "123", "GET / 200")
    e = parse("<13>Dec 31 23:59:59 host app: late", 1_704_067_200_000)  # arriving 2024-01-01 00:00:00
    assert e["timestamp_ms"] == 1_704_067_199_000  # 2023-12-31, not 2024-12-31
    e = parse("<30>2024-01-02T03:04:05Z web1 nginx: rsyslog forwarding format", NOW)
    assert (e["hostname"], e["app_name"], e["timestamp_ms"]) == ("web1", "nginx", 1704164645000)


def test_a_line_without_pri_is_kept_as_user_notice_and_marked_unparsed():
    for line in ("no pri at all", "<999>too big", "", "<>"):
        e = parse(line, NOW)
        assert (e["format"], e["facility"], e["severity"], e["message"]) == ("unparsed", 1, 5, line)
        assert e["received_ms"] == NOW


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=300))
def test_any_text_parses_into_a_record(text):
    e = parse(text, NOW)
    assert e["format"] in ("rfc5424", "rfc3164", "unparsed")
    assert 0 <= e["facility"] < 24 and 0 <= e["severity"] < 8 and isinstance(e["message"], str)


def test_framing_octet_counting_and_lines_mixed_and_split_anywhere():
    stream = b"11 <13>one two<13>line three\n0 8 <13>four\n\n<13>five\n"
    whole = TcpFramer().feed(stream)
    assert whole == [b"<13>one two", b"<13>line three", b"", b"<13>four", b"<13>five"]
    for cut in range(len(stream)):
        f = TcpFramer()
        assert f.feed(stream[:cut]) + f.feed(stream[cut:]) == whole


def test_framing_skips_oversized_messages_without_buffering_them():
    f = TcpFramer(max_message_bytes=10)
    out = f.feed(b"1000000 " + b"x" * 100)
    assert out == [] and f.oversized == 1 and len(f._buffer) == 0
    assert f.feed(b"y" * (1000000 - 100)) == [] and f.feed(b"5 hello") == [b"hello"]
    out = f.feed(b"<13>" + b"z" * 50)  # an endless line is cut, the rest of it dropped up to its LF
    assert out == [b"<13>" + b"z" * 6] and f.oversized == 2
    assert f.feed(b"zzz\n<13>ok\n") == [b"<13>ok"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=20), st.integers(1, 64))
def test_framing_any_bytes_in_any_pieces_never_fails_or_grows_past_its_limit(pieces, limit):
    f = TcpFramer(max_message_bytes=limit)
    for piece in pieces:
        for message in f.feed(piece):
            assert len(message) <= limit
        assert len(f._buffer) <= limit + 12
