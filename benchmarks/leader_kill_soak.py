"""The soak-length run of tests/replication/test_kill_leader.py's kill -9 loop (the test does it three times): on a
three-broker cluster (three controllers, three brokers, processes on 127.0.0.1), a topic of one partition with
replication factor 3 and min.insync.replicas=2, an idempotent acks=all producer and a consumer group's member
(subscribe, isolation.level=read_committed, commits after every batch) run all along while the partition's leader
is killed -9 ``--kills`` times (20 by default), each time restarted and back in the ISR before the next kill. The
topic's replicas are in the order of __consumer_offsets' own, so the group's coordinator is killed with the leader
(``coordinator_kills`` says how often it was).

Prints one JSON line: kills, records sent and acknowledged, acknowledged records lost, records duplicated, order
violations (in the log as read back at the end), the failover times (kill -9 to the first acknowledgement of a
record sent after it: median, max, all), the election times (kill -9 to the controllers' metadata naming the new
leader, polled every 50 ms: the cluster's share of the failover; the rest is the client's), the leader epochs, and the group's figures (committed offset at the end vs
the partition's end offset, offsets missing or out of order in what the member read, re-reads after a rebalance,
rewinds without one). Exit status 1 if anything acknowledged was lost, duplicated, out of order, or the group did
not end committed at the end offset.

usage: python benchmarks/leader_kill_soak.py [--kills 20] [--group-protocol classic|consumer]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TEST = os.path.join(os.path.dirname(HERE), "tests", "replication", "test_kill_leader.py")


def the_test_module():
    """tests/replication/test_kill_leader.py, whose kill loop this runs (tests is not a package)."""
    spec = importlib.util.spec_from_file_location("test_kill_leader", TEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def failed(seen: dict) -> list[str]:
    group = seen["group"]
    problems = [name for name in ("lost", "duplicated", "order_violations") if seen[name]]
    if seen["producer_errors"]:
        problems.append("producer_errors")
    if not group["committed"] == group["committed_by_member"] == seen["end_offset"]:
        problems.append("group_committed")
    problems += [name for name in ("missing_offsets", "out_of_order", "acknowledged_not_read", "mismatched",
                                   "rewinds_without_rebalance", "errors") if group[name]]
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic",
                    help="the group member's protocol (consumer: KIP-848)")
    args = ap.parse_args()
    from freshet.local.cluster import LocalCluster

    loop = the_test_module().kill_the_leader_over_and_over
    load = os.getloadavg()[0]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="freshet-soak-") as tmp, LocalCluster(3, directory=tmp) as cluster:
        seen = loop(cluster, args.kills, group_protocol=args.group_protocol)
    problems = failed(seen)
    print(json.dumps({**seen, "passed": not problems, "problems": problems,
                      "seconds": round(time.monotonic() - started), "load_average_at_start": round(load, 1),
                      "cores": os.cpu_count()}))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
