"""Fuzz the request path: --frames mutated frames at the decoder in-process, then --live-frames at a
live broker while a well-behaved client produces and fetches; checks the broker never crashed,
kept serving, logged no internal error, and left the canary topic's data unchanged."""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

from confluent_kafka.admin import AdminClient, NewTopic

from freshet.local import BrokerProcess
from freshet.format.record_batch import encode_batch
from freshet.testing.fuzz import fuzz_decoder, fuzz_live


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--live-frames", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    from freshet.testing.raw_kafka import RawConnection, SteadyClient, fetch, produce

    common = {"machine": f"{platform.machine()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d")}
    report = fuzz_decoder(args.frames, args.seed)
    print(json.dumps({"result": "fuzz_decoder", "frames": report.frames, "decoded": report.decoded,
                      "rejected": report.rejected, "findings": len(report.findings),
                      "frames_per_s": round(report.frames / report.seconds), **common}), flush=True)
    with BrokerProcess() as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for name in ("fuzz-target", "fuzz-canary"):
            admin.create_topics([NewTopic(name, 1)])[name].result(10)
        with RawConnection(b.bootstrap) as conn:
            for i in range(100):
                produce(conn, "fuzz-canary", 0, encode_batch([(b"k", b"canary-%d" % i, int(time.time() * 1000))]))
            before = fetch(conn, "fuzz-canary", 0, 0)
        client = SteadyClient(b.bootstrap, "fuzz-target")
        client.start()
        live = fuzz_live("127.0.0.1", b.port, args.live_frames, seed=args.seed)
        client.stop()
        with RawConnection(b.bootstrap) as conn:
            after = fetch(conn, "fuzz-canary", 0, 0)
        with open(b.log_path) as f:
            internal_errors = f.read().count("Traceback")
        print(json.dumps({"result": "fuzz_live", "frames": live.frames, "connections_closed": live.rejected,
                          "frames_per_s": round(live.frames / live.seconds), "broker_alive": b.proc.poll() is None,
                          "internal_errors": internal_errors, "well_behaved_requests": client.requests,
                          "well_behaved_failures": len(client.failures),
                          "canary_unchanged": (after.high_watermark, bytes(after.records)) ==
                          (before.high_watermark, bytes(before.records)), **common}), flush=True)
        del admin


if __name__ == "__main__":
    main()
