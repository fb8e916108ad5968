"""The compacted-topic key check on the produce path: old (decode every record into a Record), python_walk (walk each
record's lengths in Python, build nothing) and new (scan_records: the same walk in C, freshet.format._scan, when
built), in one process, taking turns round by round.

The batch is a state store's changelog batch as a stream-processing library writes it: ``--records`` keyed
records of 50-200 bytes (a key of 8-24 bytes, a JSON-ish value), each with ``--headers`` headers (Quix Streams
puts the column family and the processed offsets in its changelog records' headers). ``--codec`` compresses it
(both sides then decompress first, as the broker does).

Prints one JSON object: per variant the median records per CPU second of the check (this process's CPU time:
steadier than wall-clock time on a shared machine) over ``--rounds`` rounds and its spread (min, max), and the
ratios new / old and new / python_walk with their spread.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import struct
import sys
import time

from freshet.format.compression import compress
from freshet.format import record_batch
from freshet.format.record_batch import HEADER_SIZE, decode_records, encode_batch, read_header, scan_records


def changelog_batch(records: int, headers: int, codec: int, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    rows = []
    for i in range(records):
        key = b"user-%0*d" % (rng.randint(3, 19), rng.randrange(10**3))
        size = rng.randint(50, 200) - len(key) - 8  # the record's own framing: ~8 bytes of varints
        value = (b'{"count": %d, "sum": %d, "pad": "' % (i, i * 7) + b"x" * size)[:max(size, 1)]
        hdrs = (("__column_family__", b"default"), ("__processed_tp_offsets__", b'[["events", 3, %d]]' % i))
        rows.append((key, value, 1_700_000_000_000 + i, hdrs[:headers]))
    batch = encode_batch(rows)
    if codec:
        body = compress(codec, batch[HEADER_SIZE:])
        head = bytearray(batch[:HEADER_SIZE])
        struct.pack_into(">i", head, 8, HEADER_SIZE - 12 + len(body))
        struct.pack_into(">h", head, 21, codec)
        batch = bytes(head) + body
    return batch


def old_check(batch: bytes) -> list[int]:
    """The check as it was: every record decoded, then its key looked at."""
    return [i for i, record in enumerate(list(decode_records(memoryview(batch)))) if record.key is None]


def python_check(batch: bytes) -> list[int]:
    """The walk in Python (what scan_records runs where the C walk was not built)."""
    header = read_header(batch)
    return record_batch._walk(record_batch._records_payload(memoryview(batch), header), header, False).keyless


def new_check(batch: bytes) -> list[int]:
    return scan_records(memoryview(batch)).keyless


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100, help="records per batch (100)")
    parser.add_argument("--headers", type=int, default=0, choices=[0, 1, 2], help="headers per record (0)")
    parser.add_argument("--codec", type=int, default=0, help="0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (0)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.5, help="CPU seconds per variant per round (0.5)")
    args = parser.parse_args()
    batch = changelog_batch(args.records, args.headers, args.codec)
    assert old_check(batch) == python_check(batch) == new_check(batch) == []
    variants = {"old": old_check, "python_walk": python_check, "new": new_check}
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(args.rounds):
        order = list(variants)[round_ % 3:] + list(variants)[:round_ % 3]
        for name in order:
            check, calls = variants[name], 0
            start = time.process_time()
            while (elapsed := time.process_time() - start) < args.seconds:
                for _ in range(20):
                    check(batch)
                calls += 20
            rates[name].append(calls * args.records / elapsed)
    summary = {name: {"records_per_cpu_s_median": round(statistics.median(r)), "min": round(min(r)), "max": round(max(r))}
               for name, r in rates.items()}
    ratios = [n / o for n, o in zip(rates["new"], rates["old"])]
    over_python = [n / p for n, p in zip(rates["new"], rates["python_walk"])]
    print(json.dumps({
        "batch_bytes": len(batch), "records": args.records, "headers": args.headers, "codec": args.codec,
        "rounds": args.rounds, "python": platform.python_version(), "c_walk": record_batch._scan is not None,
        **summary,
        "speedup_median": round(statistics.median(ratios), 2),
        "speedup_spread": [round(min(ratios), 2), round(max(ratios), 2)],
        "over_python_walk_median": round(statistics.median(over_python), 2),
        "over_python_walk_spread": [round(min(over_python), 2), round(max(over_python), 2)],
    }))


if __name__ == "__main__":
    sys.exit(main())
