"""Security events (an IDS's or a firewall's log) with attacks planted at known times, for the lecture's
intrusion-detection rules.

Each event is ``{"event_time", "src_ip", "dst_ip", "dst_port", "group", "event_name"}``. Background
traffic comes from ``sources`` source IPs to ``servers`` destination IPs, mostly web and DNS, with a
little noise of the attack groups too thin to be an attack: a failed login now and then
(``generalbruteforce``), a stray probe (``httpscan``). Planted, each on hosts of its own:

- brute force: 25-35 ``generalbruteforce`` events to one destination within 40-90 s;
- HTTP scan: one source probing 7-9 distinct ``httpscan`` names within 40-100 s;
- peer to peer: single ``p2p`` events (there is no p2p background: every one is an incident).

Events come in event-time order but for a little disorder (a fraction up to ``max_disorder_ms`` behind),
so a watermark has work to do. ``plan()`` says what was planted, to check the alerts against.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timezone

BACKGROUND = [("web", ["GET /", "GET /login", "POST /api/orders", "GET /static/app.js"], 80),
              ("dns", ["A query", "AAAA query", "MX query"], 53),
              ("mail", ["SMTP connect", "SMTP auth"], 25)]
BRUTE = ["ssh failed password", "rdp failed logon", "ftp bad login"]
SCANS = ["/admin", "/phpmyadmin", "/wp-login.php", "/.git/config", "/.env", "/cgi-bin/test", "/backup.zip",
         "/server-status", "/etc/passwd", "/config.php"]
P2P = ["bittorrent handshake", "edonkey hello", "gnutella connect"]


@dataclass(frozen=True)
class Planted:
    rule: str  # the rule that must fire: brute_force, http_scan, p2p
    host: str  # the destination (brute force) or source (scan, p2p) IP: the rule's partition key
    start_ms: int
    end_ms: int
    events: int


@dataclass
class SecurityEvents:
    events: list[dict] = field(default_factory=list)
    planted: list[Planted] = field(default_factory=list)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _ip(rng: random.Random, first: int) -> str:
    return f"{first}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


def security_events(count: int = 100_000, seed: int = 7, sources: int = 10_000, servers: int = 200,
                    attacks: int = 5, start_ms: int = 1_767_225_600_000, rate_per_s: float = 50.0,
                    out_of_order: float = 0.05, max_disorder_ms: int = 5_000) -> SecurityEvents:
    """``count`` background events (``rate_per_s`` per second of event time; more if the attacks need the
    time), with ``attacks`` of each kind planted (each on hosts of its own, spread over the span)."""
    if count < 1 or attacks < 0 or sources < 1 or servers < 1 or rate_per_s <= 0:
        raise ValueError("count, sources, servers and rate must be positive, attacks not negative")
    rng = random.Random(seed)
    src_ips = [_ip(rng, rng.randint(11, 99)) for _ in range(sources)]
    dst_ips = [_ip(rng, 10) for _ in range(servers)]
    span_ms = int(count / rate_per_s * 1000)
    timed: list[tuple[int, int, dict]] = []
    seq = 0

    def add(when: int, src: str, dst: str, port: int, group: str, name: str) -> None:
        nonlocal seq
        timed.append((when, seq, {"event_time": when, "src_ip": src, "dst_ip": dst, "dst_port": port,
                                  "group": group, "event_name": name}))
        seq += 1

    planted: list[Planted] = []
    slot = span_ms // max(1, attacks * 3 + 1)
    for a in range(attacks * 3):
        kind = ("brute_force", "http_scan", "p2p")[a % 3]
        begin = start_ms + slot * (a + 1) + rng.randint(0, max(0, slot // 4))
        if kind == "brute_force":
            target, n, length = _ip(rng, 172), rng.randint(25, 35), rng.randint(40_000, 90_000)
            times = sorted(begin + rng.randint(0, length) for _ in range(n))
            for t in times:
                add(t, rng.choice(src_ips), target, 22, "generalbruteforce", rng.choice(BRUTE))
            planted.append(Planted(kind, target, times[0], times[-1], n))
        elif kind == "http_scan":
            scanner, length = _ip(rng, 203), rng.randint(40_000, 100_000)
            names = rng.sample(SCANS, rng.randint(7, 9))
            times = sorted(begin + rng.randint(0, length) for _ in names)
            for t, name in zip(times, names):
                add(t, scanner, rng.choice(dst_ips), 80, "httpscan", name)
            planted.append(Planted(kind, scanner, times[0], times[-1], len(names)))
        else:
            peer = _ip(rng, 198)
            add(begin, peer, rng.choice(dst_ips), 6881, "p2p", rng.choice(P2P))
            planted.append(Planted(kind, peer, begin, begin, 1))

    # background until well after the last attack (6 minutes: every rule's time limit and a watermark's
    # lateness), so a stream's watermark passes every planted attack
    last_end = max((p.end_ms for p in planted), default=start_ms)
    count = max(count, int((last_end + 6 * 60_000 - start_ms) * rate_per_s / 1000))
    step = 1000 / rate_per_s
    for i in range(count):
        when = start_ms + int(i * step)
        roll = rng.random()
        src, dst = rng.choice(src_ips), rng.choice(dst_ips)
        if roll < 0.004:
            add(when, src, dst, 22, "generalbruteforce", rng.choice(BRUTE))
        elif roll < 0.006:
            add(when, src, dst, 80, "httpscan", rng.choice(SCANS))
        else:
            group, names, port = BACKGROUND[int(roll * 1000) % len(BACKGROUND)]
            add(when, src, dst, port, group, rng.choice(names))

    timed.sort()
    # a little disorder: some events arrive after later ones (up to max_disorder_ms)
    arrival = [(when + (rng.randint(1, max_disorder_ms) if rng.random() < out_of_order else 0), s, e)
               for when, s, e in timed]
    arrival.sort(key=lambda x: (x[0], x[1]))
    events = []
    for _, _, event in arrival:
        event["event_time"] = iso(event["event_time"])
        events.append(event)
    return SecurityEvents(events, planted)
