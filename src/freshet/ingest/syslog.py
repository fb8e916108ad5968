"""Syslog messages (RFC 5424 and the BSD format of RFC 3164) parsed into JSON-ready dicts, and the two TCP
framings of RFC 6587 (octet counting, and one message per line).

A line that has no ``<PRI>`` is kept, not refused: RFC 3164 §4.3.3 tells a relay to treat it as the message
of a facility-user, severity-notice event (PRI 13), and ``format`` says "unparsed" so it can be counted.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

FACILITIES = ("kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv",
              "ftp", "ntp", "security", "console", "solaris-cron", "local0", "local1", "local2", "local3",
              "local4", "local5", "local6", "local7")
SEVERITIES = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")
UNPARSED_PRI = 13  # user.notice

# RFC 5424: VERSION SP TIMESTAMP SP HOSTNAME SP APP-NAME SP PROCID SP MSGID SP STRUCTURED-DATA [SP MSG]
_SD_BLOCK = re.compile(r'(?:\[[^\s\]=]+(?:\s+[^\s=\]]+="(?:[^"\\]|\\.)*")*\s*\])+(?= |\Z)', re.DOTALL)
# RFC 3164: Mmm dd hh:mm:ss HOSTNAME TAG[PID]: MSG (rsyslog's forwarding format puts an RFC 3339 time there)
_BSD_TIME = re.compile(r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) ([ \d]\d) (\d\d):(\d\d):(\d\d) ")
_ISO_TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ")
_TAG = re.compile(r"([^\s:\[]{1,48})(?:\[([^\]\s]{1,128})\])?: ?")
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                       "Nov", "Dec"), start=1)}
_SD_ELEMENT = re.compile(r'\[([^\s\]=]+)((?:\s+[^\s=\]]+="(?:[^"\\]|\\.)*")*)\s*\]')
_SD_PARAM = re.compile(r'([^\s=\]]+)="((?:[^"\\]|\\.)*)"')
_SD_ESCAPE = re.compile(r'\\(["\\\]])')


def parse(line: str, received_ms: int | None = None) -> dict:
    """One syslog message as a dict: facility, severity (numbers and names), timestamp (as sent) and
    timestamp_ms (None when absent or unreadable), hostname, app_name, procid, msgid, structured_data,
    message, and format ("rfc5424", "rfc3164" or "unparsed")."""
    if received_ms is None:
        received_ms = int(time.time() * 1000)
    line = line.rstrip("\r\n\x00")
    close = line.find(">", 1, 5) if line[:1] == "<" else -1
    digits = line[1:close] if close > 0 else ""
    if not digits.isdigit() or not digits.isascii() or int(digits) > 191:
        return _event(UNPARSED_PRI, "unparsed", None, None, None, None, None, None, None, line, received_ms)
    pri = int(digits)
    rest = line[close + 1:]
    header = rest.split(" ", 6)
    if len(header) == 7 and header[0].isdigit() and header[0] != "0" and len(header[0]) <= 2:
        _version, ts, host, app, procid, msgid, tail = header
        if tail[:1] == "-" and tail[1:2] in ("", " "):
            sd, msg = None, tail[2:]
        elif tail[:1] == "[" and (m := _SD_BLOCK.match(tail)):
            sd, msg = structured_data(m.group(0)), tail[m.end() + 1:]
        else:
            return _bsd(pri, rest, received_ms)
        if msg[:1] == "\ufeff":
            msg = msg[1:]
        ts = None if ts == "-" else ts
        return _event(pri, "rfc5424", ts, _iso_ms(ts), _nil(host), _nil(app), _nil(procid), _nil(msgid), sd, msg,
                      received_ms)
    return _bsd(pri, rest, received_ms)


def _bsd(pri: int, rest: str, received_ms: int) -> dict:
    ts = ts_ms = None
    t = _BSD_TIME.match(rest)
    if t:
        ts = t.group(0)[:-1]
        ts_ms = _bsd_ms(t, received_ms)
        rest = rest[t.end():]
    else:
        t = _ISO_TIME.match(rest)
        if t:
            ts = t.group(1)
            ts_ms = _iso_ms(ts)
            rest = rest[t.end():]
    host = None
    if ts is not None:  # HOSTNAME follows a timestamp, unless the sender left it out (a TAG: comes first)
        first, sep, after = rest.partition(" ")
        if sep and not first.endswith(":") and "[" not in first:
            host, rest = first, after
    app = procid = None
    tag = _TAG.match(rest)
    if tag and rest[tag.end() - 1:tag.end()] in (":", " ") and ":" in rest[:tag.end()]:
        app, procid = tag.group(1), tag.group(2)
        rest = rest[tag.end():]
    return _event(pri, "rfc3164", ts, ts_ms, host, app, procid, None, None, rest, received_ms)


def _event(pri, fmt, ts, ts_ms, host, app, procid, msgid, sd, msg, received_ms) -> dict:
    facility, severity = divmod(pri, 8)
    return {"facility": facility, "facility_name": FACILITIES[facility], "severity": severity,
            "severity_name": SEVERITIES[severity], "timestamp": ts, "timestamp_ms": ts_ms, "hostname": host,
            "app_name": app, "procid": procid, "msgid": msgid, "structured_data": sd, "message": msg,
            "format": fmt, "received_ms": received_ms}


def _nil(value: str) -> str | None:
    return None if value == "-" else value


def _iso_ms(ts: str | None) -> int | None:
    """RFC 3339 time to epoch ms; the whole seconds of each (second, zone) read once and cached (a busy
    sender repeats them thousands of times), the fraction added."""
    if ts is None:
        return None
    head, rest = ts[:19], ts[19:]
    fraction = ""
    if rest[:1] == ".":
        if rest[-1:] == "Z" and rest[1:-1].isdigit():  # the usual form: .123Z, .123456Z
            fraction, rest = rest[1:-1], "Z"
        else:
            i = 1
            while i < len(rest) and rest[i].isdigit():
                i += 1
            fraction, rest = rest[1:i], rest[i:]
        if not fraction.isascii():
            return None
    base = _SECONDS.get((head, rest))
    if base is None:
        try:
            when = datetime.fromisoformat(head + rest)
        except ValueError:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        if len(_SECONDS) > 4096:
            _SECONDS.clear()
        base = _SECONDS[(head, rest)] = int(when.timestamp()) * 1000
    return base + (int((fraction + "00")[:3]) if fraction else 0)


_SECONDS: dict[tuple[str, str], int] = {}


def _bsd_ms(t: re.Match, received_ms: int) -> int | None:
    """RFC 3164 times carry no year or zone: read as UTC in the year that puts them nearest the arrival
    (a December line arriving on 1 January belongs to the year before)."""
    now = datetime.fromtimestamp(received_ms / 1000, UTC)
    try:
        month, day = _MONTHS[t.group(1)], int(t.group(2))
        candidates = [datetime(y, month, day, int(t.group(3)), int(t.group(4)), int(t.group(5)), tzinfo=UTC)
                      for y in (now.year - 1, now.year, now.year + 1) if _valid(y, month, day)]
    except ValueError:
        return None
    if not candidates:
        return None
    return int(min(candidates, key=lambda c: abs((c - now).total_seconds())).timestamp() * 1000)


def _valid(year: int, month: int, day: int) -> bool:
    try:
        datetime(year, month, day)
    except ValueError:
        return False
    return True


def structured_data(sd: str) -> dict[str, dict[str, str]] | None:
    """``[id k="v"][id2 ...]`` as {id: {k: v}} (escaped ``\\" \\\\ \\]`` unescaped)."""
    out: dict[str, dict[str, str]] = {}
    for element in _SD_ELEMENT.finditer(sd):
        out[element.group(1)] = {k: _SD_ESCAPE.sub(r"\1", v) for k, v in _SD_PARAM.findall(element.group(2))}
    return out


class TcpFramer:
    """Splits a TCP byte stream into syslog messages (RFC 6587): octet counting (``LEN SP MSG``) when a
    message starts with a digit, else one message per LF (the framing rsyslog and syslog-ng use by default).
    Feed it bytes as they arrive; it returns the complete messages and keeps the rest. A message longer
    than ``max_message_bytes`` is skipped (octet counting) or cut (a line), and counted in ``oversized``."""

    def __init__(self, max_message_bytes: int = 64 * 1024) -> None:
        self.max_message_bytes = max_message_bytes
        self._buffer = bytearray()
        self._skip = 0  # bytes still to discard of an oversized octet-counted message
        self._cut = False  # inside an oversized line: discard up to its LF
        self.oversized = 0

    def feed(self, data: bytes) -> list[bytes]:
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        buf = self._buffer
        buf += data
        out: list[bytes] = []
        start, n, limit = 0, len(buf), self.max_message_bytes
        while start < n:
            if self._cut:
                nl = buf.find(b"\n", start)
                if nl < 0:
                    start = n
                    break
                self._cut = False
                start = nl + 1
                continue
            if 48 <= buf[start] <= 57:  # a digit: octet counting, if a length and a space follow
                space = buf.find(b" ", start, min(n, start + 11))
                if space > start and buf[start:space].isdigit():
                    length = int(buf[start:space])
                    end = space + 1 + length
                    if length > limit:
                        self.oversized += 1
                        self._skip = max(end - n, 0)
                        start = min(end, n)
                        continue
                    if end > n:
                        break
                    out.append(bytes(buf[space + 1:end]))
                    start = end
                    continue
                if space < 0 and n - start < 11 and buf[start:n].isdigit():
                    break  # a length still arriving
            nl = buf.find(b"\n", start)
            if nl < 0:
                if n - start > limit:
                    self.oversized += 1
                    out.append(bytes(buf[start:start + limit]))
                    self._cut = True
                    start = n
                break
            if nl - start > limit:
                self.oversized += 1
                out.append(bytes(buf[start:start + limit]))
            elif nl > start:
                out.append(bytes(buf[start:nl]))
            start = nl + 1
        del buf[:start]
        return out
