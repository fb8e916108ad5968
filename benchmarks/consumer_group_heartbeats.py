"""KIP-848 heartbeats that change nothing, on a coordinator whose groups are stored in ``__consumer_offsets``
(a cluster's: ``consumer_records.ConsumerGroupStore`` as ``on_change``), for groups of 10, 100 and 1,000 members.

Each member of a stable group (two topics of N partitions, one of each per member, ``range``) heartbeats at its
epoch owning its partitions, as a consumer does every heartbeat interval; we count heartbeats per CPU second of
this process (``time.process_time``; wall clock beside it), with the store and without one (the coordinator
alone: its own cost per heartbeat). No broker, no network: ``ConsumerGroupCoordinator.heartbeat`` directly.

``--base SRC`` compares with another tree (e.g. a ``git worktree`` of the parent commit: ``--base /tmp/x/src``):
each round runs both in fresh processes, alternating, and the medians and spread are printed.
Prints one JSON object per (tree, members, store) result.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def measure(members: int, store: bool, seconds: float) -> dict:
    from freshet.broker.config import ConsumerGroupSettings
    from freshet.broker.groups import consumer_records
    from freshet.broker.groups.consumer import ConsumerGroupCoordinator, ConsumerMember
    from freshet.broker.groups.offsets import OffsetStore
    from freshet.broker.topics.registry import TopicRegistry

    with tempfile.TemporaryDirectory() as tmp:
        registry = TopicRegistry(tmp)
        registry.create("orders", members)
        registry.create("payments", members)
        coordinator = ConsumerGroupCoordinator(registry, ConsumerGroupSettings(default_assignor="range"))
        if store:
            coordinator.on_change = consumer_records.ConsumerGroupStore(coordinator, OffsetStore(registry)).changed
        # a stable group built at once (joining 1,000 members one by one recomputes the target 1,000 times)
        coordinator.heartbeat("g", "m-0000", 0, instance_id=None, rack_id=None, rebalance_timeout_ms=45000,
                              subscribed_names=("orders", "payments"), subscribed_regex=None, server_assignor=None,
                              owned={}, client_id="bench", client_host="127.0.0.1", version=1)
        group = coordinator.group("g")
        for i in range(1, members):
            mid = f"m-{i:04d}"
            group.members[mid] = ConsumerMember(mid, None, None, "bench", "127.0.0.1", 45000,
                                                subscribed_names=("orders", "payments"))
        group.epoch += 1
        group.subscriptions = None  # the members' subscriptions are listed again (a tree that keeps them)
        coordinator._compute_target(group)
        for m in group.members.values():
            m.assigned, m.pending_revocation = group.target[m.member_id], {}
            m.epoch, m.previous_epoch, m.state = group.assignment_epoch, m.epoch, "stable"
            m.sent = dict(m.assigned)
        coordinator._changed("g")  # everything stored once
        assert group.state == "Stable", group.state
        ordered = list(group.members.values())
        beats = 0
        cpu0, wall0 = time.process_time(), time.perf_counter()
        while time.process_time() - cpu0 < seconds:
            for m in ordered[:200]:
                body = coordinator.heartbeat("g", m.member_id, m.epoch, instance_id=None, rack_id=None,
                                             rebalance_timeout_ms=-1, subscribed_names=None, subscribed_regex=None,
                                             server_assignor=None, owned=m.assigned, client_id="bench",
                                             client_host="127.0.0.1", version=1)
                assert body["written"] is None and body["member_epoch"] == m.epoch
                beats += 1
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        assert group.state == "Stable"
        registry.close()
    return {"members": members, "store": store, "heartbeats": beats, "cpu_s": round(cpu, 3),
            "wall_s": round(wall, 3), "per_cpu_s": round(beats / cpu)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--members", default="10,100,1000")
    ap.add_argument("--seconds", type=float, default=2.0, help="CPU seconds of heartbeats per measurement")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base", help="another tree's src/ to alternate with (the baseline)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sizes = [int(n) for n in args.members.split(",")]
    if args.worker:
        for n in sizes:
            for store in (True, False):
                print(json.dumps(measure(n, store, args.seconds)), flush=True)
        return
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    trees = {"this": os.path.abspath(here)} | ({"base": os.path.abspath(args.base)} if args.base else {})
    results: dict[tuple, list[dict]] = {}
    for _ in range(args.rounds):
        for name, src in trees.items():
            out = subprocess.run([sys.executable, __file__, "--worker", "--members", args.members,
                                  "--seconds", str(args.seconds)], check=True, capture_output=True, text=True,
                                 env={**os.environ, "PYTHONPATH": src})
            for line in out.stdout.splitlines():
                r = json.loads(line)
                results.setdefault((name, r["members"], r["store"]), []).append(r)
    for (name, n, store), rs in sorted(results.items()):
        rates = [r["per_cpu_s"] for r in rs]
        print(json.dumps({"tree": name, "members": n, "store": store, "heartbeats_per_cpu_s": statistics.median(rates),
                          "min": min(rates), "max": max(rates),
                          "cpu_per_wall": round(sum(r["cpu_s"] for r in rs) / sum(r["wall_s"] for r in rs), 2)}))


if __name__ == "__main__":
    main()
