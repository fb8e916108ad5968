"""What an operator does to a running cluster through the controllers (``freshet cluster decommission`` and
``rebalance``): a plan from ``placement``, applied as partition reassignments (``AlterPartitionReassignment``:
the new replicas catch up and join the ISR before the old ones are dropped), then preferred elections, then,
for a decommission, ``UnregisterBroker`` once the broker holds nothing and has stopped."""

from __future__ import annotations

import time
from typing import Callable

from .client import ControllerClient
from .placement import Plan, PlanError, decommission_plan, rebalance_plan

__all__ = ["Operations", "PlanError"]


class Operations:
    def __init__(self, addresses: list[tuple[str, int]], timeout_s: float = 300.0, password: str | None = None) -> None:
        """``password``: the cluster secret, for controllers started with --endpoint-auth (default: the file
        $FRESHET_CONTROLLER_PASSWORD_FILE names, if any)."""
        if not addresses:
            raise PlanError("no controller to talk to")
        self.addresses = addresses
        self.timeout_s = timeout_s
        self.password = password

    def _request(self, request: dict) -> dict:
        last: Exception | None = None
        for address in self.addresses:
            try:
                with ControllerClient(address, timeout=30, password=self.password) as client:
                    return client.request(request)
            except OSError as exc:
                last = exc
        raise PlanError(f"no controller of {self.addresses} answered ({last})")

    def metadata(self) -> dict:
        return self._request({"op": "metadata"})

    def command(self, command: dict) -> dict:
        return self._request({"op": "command", "command": command})

    def _wait(self, predicate: Callable[[dict], bool], what: str) -> dict:
        end = time.monotonic() + self.timeout_s
        while True:
            snapshot = self.metadata()
            if predicate(snapshot):
                return snapshot
            if time.monotonic() > end:
                raise PlanError(f"gave up waiting for {what} after {self.timeout_s:.0f} s")
            time.sleep(0.2)

    # -- plans -------------------------------------------------------------------------------------------------
    def apply(self, plan: Plan, progress: Callable[[str], None] = lambda line: None) -> None:
        """Reassigns every partition of the plan, waits until each holds exactly its new replicas, then gives
        each its preferred leader (the first replica) where another leads. A plan the controllers refuse a part
        of changes nothing: the moves already started for it are cancelled (back to their replicas) before the
        PlanError."""
        started: list[tuple[str, int]] = []
        for (topic, index), replicas in sorted(plan.items()):
            answer = self.command({"command": "AlterPartitionReassignment", "topic": topic, "partition": index,
                                   "replicas": list(replicas)})
            if answer.get("error") != "NONE":
                for t, i in started:
                    self.command({"command": "AlterPartitionReassignment", "topic": t, "partition": i,
                                  "cancel": True})
                undone = f"; the {len(started)} move(s) started before it were cancelled" if started else ""
                raise PlanError(f"reassigning {topic}-{index} to {replicas}: {answer.get('error')} "
                                f"{answer.get('message')}{undone}")
            started.append((topic, index))
            progress(f"{topic}-{index}: reassigning to {replicas}")

        def done(snapshot: dict) -> bool:
            parts = _by_key(snapshot)
            return all(key in parts and parts[key]["replicas"] == replicas and not parts[key].get("adding_replicas")
                       and not parts[key].get("removing_replicas") for key, replicas in plan.items())

        snapshot = self._wait(done, "the reassignments to complete")
        parts = _by_key(snapshot)
        for key in sorted(plan):
            if parts[key]["leader"] != plan[key][0]:
                answer = self.command({"command": "ElectLeaders", "topic": key[0], "partition": key[1]})
                error = answer.get("error")
                progress(f"{key[0]}-{key[1]}: preferred leader {plan[key][0]} " + (
                    "elected" if error == "NONE" else f"not elected: {error} {answer.get('message') or ''}".rstrip()))

    def rebalance(self) -> tuple[dict, Plan]:
        snapshot = self.metadata()
        return snapshot, rebalance_plan(snapshot)

    def decommission(self, broker: int, stop: Callable[[int], None] | None = None,
                     progress: Callable[[str], None] = lambda line: None) -> Plan:
        """Moves every replica off ``broker`` (refused, nothing changed, when a partition would fall below its
        replication factor), stops it (``stop``, a controlled shutdown: it leads nothing by then), waits until it
        is fenced, and unregisters it."""
        plan = self.decommission_plan(broker)
        self.apply(plan, progress)
        self.retire(broker, stop, progress)
        return plan

    def decommission_plan(self, broker: int) -> Plan:
        return decommission_plan(self.metadata(), broker)

    def retire(self, broker: int, stop: Callable[[int], None] | None = None,
               progress: Callable[[str], None] = lambda line: None) -> None:
        """Once ``broker`` holds no replica: stops it (``stop``), waits until it is fenced, unregisters it."""
        self._wait(lambda m: all(broker not in p["replicas"] for _, p in _by_key(m).items()),
                   f"broker {broker} to hold no replica")
        if stop is not None:
            stop(broker)
            self._wait(lambda m: all(b["fenced"] for b in m["brokers"] if b["broker_id"] == broker),
                       f"broker {broker} to stop")
        answer = self.command({"command": "UnregisterBroker", "broker_id": broker})
        if answer.get("error") != "NONE":
            raise PlanError(f"unregistering broker {broker}: {answer.get('error')} {answer.get('message')}")
        progress(f"broker {broker} unregistered")


def _by_key(snapshot: dict) -> dict[tuple[str, int], dict]:
    return {(t["name"], p["partition"]): p for t in snapshot["topics"] for p in t["partitions"]}
