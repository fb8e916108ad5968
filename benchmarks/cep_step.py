"""The routing and the stateful step of `freshet run cep` without Spark: CPU seconds over the dense rule set.

The events of ``benchmarks/cep.py``'s dense set (eight rules, three quarters of the events reaching two to four)
go through ``route``'s function in Arrow chunks of 10,000 (as ``mapInArrow`` hands them), and the packs of each
(rule, bucket) through the step (``applyInPandasWithState``'s function) microbatch by microbatch, ``--batch``
events a microbatch, the watermark ``--lateness-s`` behind the newest event of the batch before (as
``withWatermark`` sets it), a group's state kept as Spark would keep it (the text the step writes). What this
leaves out is Spark's own part (the JVM, PySpark's conversions, the source and the sink): this is the part of a
run's Python CPU that is ours, measured without the noise of the rest.

Each measurement also gives the step's CPU seconds rule by rule and a digest of the alerts' content (every
column of every alert, sorted): two trees that let out the same alerts give the same digest.

``--compare <tree>`` alternates this tree with another source tree (``<tree>/src``, e.g. a ``git worktree`` of
an older commit) in separate processes, ``--rounds`` rounds each, and prints medians and ranges, and whether
every run's alerts were the same.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


class GroupState:
    """Spark's GroupState as ``applyInPandasWithState`` hands it to the step (the timeout is not needed: every
    group is called each batch here)."""

    def __init__(self) -> None:
        self.value, self.watermark = None, 0

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self):
        return self.value

    def update(self, value) -> None:
        self.value = value

    def remove(self) -> None:
        self.value = None

    def getCurrentWatermarkMs(self) -> int:
        return self.watermark

    def setTimeoutTimestamp(self, ms: int) -> None:
        pass


def measure(events: int, batch: int, lateness_ms: int) -> dict:
    import pyarrow as pa

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cep import DENSE_RULES, dense_events

    from freshet.pipelines import cep as pipeline

    rules = pipeline.FixedRules(DENSE_RULES)
    router, step = pipeline._router(rules), pipeline._match_step(rules)
    texts = [json.dumps(e) for e in dense_events(events)]
    states: dict[tuple, GroupState] = {}
    watermark = newest = alerts = 0
    route_s = step_s = 0.0
    by_rule: dict[str, float] = {}
    frames = []  # the step's output, for the alerts' digest
    for at in range(0, len(texts), batch):
        chunk = texts[at:at + batch]
        table = pa.table({"value": pa.array(chunk), "topic": pa.array(["dense-events"] * len(chunk)),
                          "partition": pa.array([i % 4 for i in range(len(chunk))], pa.int32()),
                          "offset": pa.array(range(at, at + len(chunk)), pa.int64())})
        began = time.process_time()
        routed = [out for part in table.to_batches(max_chunksize=10_000) for out in router(iter([part]))]
        route_s += time.process_time() - began
        frame = pa.Table.from_batches(routed).to_pandas()
        frame = frame[frame["rule"] != ""]
        newest = max(newest, int(frame["event_time"].max().value // 1_000_000))
        began_all = time.process_time()  # the groups' split included, as before
        for key, group in frame.groupby(["rule", "bucket"]):
            state = states.setdefault(key, GroupState())
            state.watermark = watermark
            began = time.process_time()
            for out in step(key, iter([group]), state):
                alerts += len(out)
                frames.append(out)
            by_rule[key[0]] = by_rule.get(key[0], 0.0) + time.process_time() - began
        step_s += time.process_time() - began_all
        watermark = newest - lateness_ms
    return {"events": events, "batch": batch, "alerts": alerts, "alerts_digest": _digest(frames),
            "route_cpu_s": round(route_s, 2), "step_cpu_s": round(step_s, 2),
            "events_per_cpu_s": round(events / (route_s + step_s)), "step_events_per_cpu_s": round(events / step_s),
            "step_cpu_s_by_rule": {rule: round(s, 3) for rule, s in sorted(by_rule.items())}}


def _digest(frames: list) -> str:
    """A digest of the alerts' content (every column of every row, in a sorted order): two trees whose
    step lets out the same alerts have the same one."""
    import hashlib

    rows = sorted(tuple(str(value) for value in row) for out in frames for row in out.itertuples(index=False))
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--batch", type=int, default=100_000, help="events a microbatch")
    parser.add_argument("--lateness-s", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", help="another source tree to alternate with (its src/ on PYTHONPATH)")
    parser.add_argument("--once", action="store_true", help="one measurement in this process (JSON)")
    args = parser.parse_args()
    if args.once:
        print(json.dumps(measure(args.events, args.batch, int(args.lateness_s * 1000))))
        return
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"this": here, **({"other": os.path.abspath(args.compare)} if args.compare else {})}
    results: dict[str, list[dict]] = {name: [] for name in trees}
    for round_no in range(args.rounds):
        for name in (list(trees) if round_no % 2 == 0 else list(trees)[::-1]):
            env = {**os.environ, "PYTHONPATH": os.path.join(trees[name], "src")}
            run = subprocess.run([sys.executable, os.path.abspath(__file__), "--once", "--events", str(args.events),
                                  "--batch", str(args.batch), "--lateness-s", str(args.lateness_s)],
                                 capture_output=True, text=True, env=env)
            if run.returncode != 0:
                raise SystemExit(f"{name}: {run.stderr[-2000:]}")
            shown = json.loads(run.stdout.strip().splitlines()[-1])
            print(json.dumps({"tree": name, **shown, "load_average": [round(x, 2) for x in os.getloadavg()]}),
                  flush=True)
            results[name].append(shown)
    print(json.dumps({"summary": {name: {key: {"median": statistics.median(r[key] for r in runs),
                                               "min": min(r[key] for r in runs), "max": max(r[key] for r in runs)}
                                         for key in ("route_cpu_s", "step_cpu_s", "events_per_cpu_s",
                                                     "step_events_per_cpu_s")}
                                  for name, runs in results.items()},
                      "same_alerts": len({r["alerts_digest"] for runs in results.values() for r in runs}) == 1}))


if __name__ == "__main__":
    main()
