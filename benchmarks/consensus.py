"""The controller's consensus engine, measured: pysyncobj (Raft inside our controller processes) against etcd
3.4 (Debian's etcd-server), each a group of three processes on 127.0.0.1.

For each engine: the commit latency of one small metadata change (p50 / p99 / max over ``--commits``
sequential changes, sent to the leader and to a follower), the failover time (the leader killed -9 → the next
change committed through a survivor; ``--failovers`` times, the killed node restarted on its data directory
in between) and the CPU the three processes spend at idle (``--idle`` seconds, from /proc).

- pysyncobj: ``python -m freshet.controller`` processes (our state machine, its JSON endpoint); a change is
  an ``AlterConfigs`` of the cluster's broker default, answered once the node asked has applied it.
  pysyncobj does not fsync its journal (an mmap, msync'd by nobody): a commit is in three page caches.
- etcd: ``etcd`` processes (defaults: heartbeat 100 ms, election timeout 1000 ms), a change is a put through
  the v3 JSON gateway (``POST /v3/kv/put``) on one keep-alive connection; etcd fsyncs its WAL before it
  acknowledges: a commit is on two disks at least.

    python benchmarks/consensus.py [--engine pysyncobj|etcd|both] [--commits 500] [--failovers 5] [--idle 10]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from freshet.controller.client import ControllerClient
from freshet.local import free_port

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def percentiles(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
        "n": len(ordered),
    }


def wait(what: str, probe, deadline: float = 120.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            value = probe()
            if value:
                return value
        except (OSError, ValueError, http.client.HTTPException):
            pass
        time.sleep(0.02)
    raise SystemExit(f"gave up waiting for {what}")


class PySyncObjGroup:
    name = "pysyncobj"

    def __init__(self, root: str) -> None:
        self.root = root
        self.raft = {n: free_port() for n in (1, 2, 3)}
        self.api = {n: free_port() for n in (1, 2, 3)}
        self.voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in self.raft.items())
        self.procs: dict[int, subprocess.Popen] = {}
        self._n = 0

    def start(self, node: int) -> None:
        self.procs[node] = subprocess.Popen(
            [sys.executable, "-m", "freshet.controller", "--node-id", str(node), "--voters", self.voters,
             "--listen", f"127.0.0.1:{self.api[node]}", "--data-dir", os.path.join(self.root, f"c{node}")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def _ask(self, node: int, request: dict, timeout: float = 30.0) -> dict:
        with ControllerClient(("127.0.0.1", self.api[node]), timeout=timeout) as client:
            return client.request(request)

    def leader(self, among=(1, 2, 3)) -> int | None:
        """The leader every node agrees on, once every node is connected to every other one."""
        statuses = [self._ask(n, {"op": "status"}) for n in among]
        ids = {s["controller_id"] for s in statuses}
        if any(s["peers_connected"] < len(among) - 1 for s in statuses):
            return None
        if len(ids) == 1 and (leader := ids.pop()) in among:
            return leader if self._ask(leader, {"op": "status"})["active"] else None
        return None

    def change(self, node: int, timeout: float = 30.0) -> bool:
        self._n += 1
        answer = self._ask(node, {"op": "command", "command": {
            "command": "AlterConfigs", "resource_type": "broker", "name": "", "set": {"bench.n": str(self._n)}}},
            timeout)
        return answer["error"] == "NONE"

    def committer(self, node: int):
        client = ControllerClient(("127.0.0.1", self.api[node]))

        def commit():
            self._n += 1
            answer = client.command({"command": "AlterConfigs", "resource_type": "broker", "name": "",
                                     "set": {"bench.n": str(self._n)}})
            assert answer["error"] == "NONE", answer
        return commit, client.close


class EtcdGroup:
    name = "etcd"

    def __init__(self, root: str) -> None:
        self.root = root
        self.peer = {n: free_port() for n in (1, 2, 3)}
        self.client = {n: free_port() for n in (1, 2, 3)}
        self.cluster = ",".join(f"e{n}=http://127.0.0.1:{p}" for n, p in self.peer.items())
        self.procs: dict[int, subprocess.Popen] = {}
        self.member_ids: dict[int, int] = {}
        self._n = 0

    def start(self, node: int) -> None:
        data = os.path.join(self.root, f"e{node}")
        self.procs[node] = subprocess.Popen(
            ["etcd", "--name", f"e{node}", "--data-dir", data,
             "--listen-peer-urls", f"http://127.0.0.1:{self.peer[node]}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer[node]}",
             "--listen-client-urls", f"http://127.0.0.1:{self.client[node]}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.client[node]}",
             "--initial-cluster", self.cluster, "--initial-cluster-state", "new",
             "--initial-cluster-token", "freshet-bench"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def _post(self, node: int, path: str, body: dict, timeout: float = 30.0) -> dict:
        conn = http.client.HTTPConnection("127.0.0.1", self.client[node], timeout=timeout)
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            response = conn.getresponse()
            return json.loads(response.read())
        finally:
            conn.close()

    def leader(self, among=(1, 2, 3)) -> int | None:
        statuses = {n: self._post(n, "/v3/maintenance/status", {}, 2.0) for n in among}
        for n, s in statuses.items():
            self.member_ids[n] = int(s["header"]["member_id"])
        leaders = {int(s.get("leader", 0)) for s in statuses.values()}
        if len(leaders) != 1:
            return None
        leader = leaders.pop()
        return next((n for n, m in self.member_ids.items() if m == leader and n in among), None)

    def _put_body(self) -> dict:
        self._n += 1
        return {"key": base64.b64encode(b"/freshet/bench").decode(),
                "value": base64.b64encode(str(self._n).encode()).decode()}

    def change(self, node: int, timeout: float = 30.0) -> bool:
        return "header" in self._post(node, "/v3/kv/put", self._put_body(), timeout)

    def committer(self, node: int):
        conn = http.client.HTTPConnection("127.0.0.1", self.client[node], timeout=30)

        def commit():
            conn.request("POST", "/v3/kv/put", json.dumps(self._put_body()), {"Content-Type": "application/json"})
            answer = json.loads(conn.getresponse().read())
            assert "header" in answer, answer
        return commit, conn.close


def measure(group, commits: int, failovers: int, idle: float) -> dict:
    for node in (1, 2, 3):
        group.start(node)
    try:
        leader = wait("a leader", group.leader)
        wait("a first change", lambda: group.change(leader))
        result = {"engine": group.name}
        follower = leader % 3 + 1
        for label, node in (("commit_via_leader", leader), ("commit_via_follower", follower)):
            commit, close = group.committer(node)
            try:
                for _ in range(min(50, commits)):  # warm-up
                    commit()
                samples = []
                for _ in range(commits):
                    began = time.perf_counter()
                    commit()
                    samples.append(time.perf_counter() - began)
            finally:
                close()
            result[label] = percentiles(samples)

        pids = [p.pid for p in group.procs.values()]
        before = sum(cpu_seconds(pid) for pid in pids)
        began = time.monotonic()
        time.sleep(idle)  # measuring idle: nothing to wait for but time
        spent = sum(cpu_seconds(pid) for pid in pids) - before
        result["idle_cpu_percent_of_one_core_3_nodes"] = round(100 * spent / (time.monotonic() - began), 2)

        times = []
        for _ in range(failovers):
            leader = wait("a leader all agree on", group.leader)
            survivors = tuple(n for n in (1, 2, 3) if n != leader)
            entry = survivors[0]
            group.procs[leader].send_signal(signal.SIGKILL)
            killed = time.perf_counter()
            group.procs[leader].wait()
            while True:  # each try waits 0.5 s at most: etcd holds a put to a dead leader until its own timeout
                try:
                    if group.change(entry, timeout=0.5):
                        break
                except (OSError, ValueError, http.client.HTTPException):
                    time.sleep(0.01)
            times.append(time.perf_counter() - killed)
            group.start(leader)  # back on its data directory, as a follower
            wait("the killed node back in the group", lambda: group.leader() is not None)
        if times:
            result["failover_s"] = {
                "median": round(statistics.median(times), 3), "min": round(min(times), 3),
                "max": round(max(times), 3), "runs": [round(t, 3) for t in times],
            }
        return result
    finally:
        for proc in group.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in group.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=("pysyncobj", "etcd", "both"), default="both")
    parser.add_argument("--commits", type=int, default=500)
    parser.add_argument("--failovers", type=int, default=5)
    parser.add_argument("--idle", type=float, default=10.0)
    args = parser.parse_args()
    engines = ["pysyncobj", "etcd"] if args.engine == "both" else [args.engine]
    if "etcd" in engines and shutil.which("etcd") is None:
        raise SystemExit("etcd is not installed (apt-get install etcd-server), or run --engine pysyncobj")
    with open("/proc/loadavg") as f:
        print(json.dumps({"loadavg": f.read().split()[:3], "cpus": os.cpu_count()}))
    for engine in engines:
        with tempfile.TemporaryDirectory(prefix=f"freshet-{engine}-") as root:
            group = PySyncObjGroup(root) if engine == "pysyncobj" else EtcdGroup(root)
            print(json.dumps(measure(group, args.commits, args.failovers, args.idle)), flush=True)


if __name__ == "__main__":
    main()
