"""The log's produce path (Partition.append) per batch, before and after a change, in alternating rounds: what the
walk over every produced batch's records (freshet.format.record_batch.scan_records) costs, and what one walk instead
of two saves on a compacted topic with timestamp bounds.

Each round runs this tree and ``--baseline-src DIR`` (another source tree, e.g. ``git archive HEAD~1 src | tar -x``
with its C walk built) in turn, each in a fresh process, the order swapped every round. A process appends the same
batches to a fresh partition on tmpfs (/dev/shm: the page cache, as the broker's writes between fsyncs) for
``--seconds`` of its own CPU time per case and reports batches per CPU second (process CPU time: steadier than
wall-clock time on a shared machine).

The cases are producer batches of keyed records of 50-200 B with a header (record_scan.py's changelog_batch), 1 (a
live source at low rate: small_requests.py), 10, 100 and 1,000 (broker_throughput.py's producer at linger.ms=5)
records a batch, uncompressed and in each codec; ``compact+bounded``: 100 keyed records on a compacted topic with
message.timestamp.before.max.ms set (the key check and the timestamp bounds).

Prints one JSON object: per case the median batches per CPU second of each tree over ``--rounds`` rounds with their
spread (min, max), the microseconds per batch, and the ratio this tree / baseline with its spread.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
import time

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CASES = [  # (name, records a batch, codec, topic)
    ("1 rec", 1, "none", "plain"),
    ("10 rec", 10, "none", "plain"),
    ("100 rec", 100, "none", "plain"),
    ("1000 rec", 1000, "none", "plain"),
    ("100 rec gzip", 100, "gzip", "plain"),
    ("100 rec snappy", 100, "snappy", "plain"),
    ("100 rec lz4", 100, "lz4", "plain"),
    ("100 rec zstd", 100, "zstd", "plain"),
    ("1000 rec lz4", 1000, "lz4", "plain"),
    ("1000 rec zstd", 1000, "zstd", "plain"),
    ("100 rec compact+bounded", 100, "none", "compact+bounded"),
]


def worker(seconds: float) -> None:
    """Runs in the tree under test (its src first on sys.path): one rate per case, as JSON on stdout."""
    import crc32c

    from freshet.log import LogConfig, Partition
    from record_scan import changelog_batch  # benchmarks/record_scan.py: keyed records of 50-200 B with headers

    def batch(count: int, codec: int) -> bytes:
        out = bytearray(changelog_batch(count, 1, codec))
        struct.pack_into(">q", out, 27, int(time.time() * 1000))  # base timestamp: now (the bounded topic's check)
        struct.pack_into(">q", out, 35, int(time.time() * 1000) + count - 1)
        struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))  # the CRC-32C a client writes
        return bytes(out)

    rates = {}
    for name, count, codec, topic in CASES:
        data = batch(count, CODECS[codec])
        config = (LogConfig(cleanup_policy="compact", message_timestamp_before_max_ms=3_600_000)
                  if topic == "compact+bounded" else LogConfig())
        with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
            p = Partition(os.path.join(tmp, "p0"), config)
            for _ in range(50):  # warm up
                p.append(data)
            calls, start = 0, time.process_time()
            while True:
                for _ in range(50):
                    p.append(data)
                calls += 50
                used = time.process_time() - start
                if used >= seconds:
                    break
                if p.size_bytes > 256 << 20:  # keep tmpfs small: a fresh partition
                    p.close()
                    p.delete()
                    p = Partition(os.path.join(tmp, "p0"), config)
            rates[name] = calls / used
            p.close()
    print(json.dumps(rates))


def run(src: str, seconds: float) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.path.join(src, "src"))
    out = subprocess.run([sys.executable, __file__, "--worker", "--seconds", str(seconds)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-src", help="the source tree to compare with (its src/ on PYTHONPATH)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.4, help="CPU seconds per case per run (0.4)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.seconds)
        return
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"this": here}
    if args.baseline_src:
        trees["baseline"] = os.path.abspath(args.baseline_src)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for name in order:
            results[name].append(run(trees[name], args.seconds))
        print(f"round {round_ + 1}: " + ", ".join(f"{n} {results[n][-1]['100 rec']:.0f}/s (100 rec)" for n in order),
              file=sys.stderr)
    summary = {}
    for case, *_ in CASES:
        row = {}
        for name in trees:
            rates = [r[case] for r in results[name]]
            row[name] = {"batches_per_cpu_s": round(statistics.median(rates)), "spread": [round(min(rates)),
                                                                                        round(max(rates))],
                         "us_per_batch": round(1e6 / statistics.median(rates), 1)}
        if "baseline" in trees:
            ratios = [a[case] / b[case] for a, b in zip(results["this"], results["baseline"])]
            row["this/baseline"] = {"median": round(statistics.median(ratios), 3),
                                    "spread": [round(min(ratios), 3), round(max(ratios), 3)]}
        summary[case] = row
    print(json.dumps({"machine": platform.processor() or platform.machine(), "load": os.getloadavg()[0],
                      "rounds": args.rounds, "seconds": args.seconds, "cases": summary}, indent=1))


if __name__ == "__main__":
    main()
