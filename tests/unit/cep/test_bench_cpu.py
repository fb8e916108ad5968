"""benchmarks/cep.py's CPU count of the Spark tree (``TreeCpu``): the CPU of processes that end during a run,
and a Python worker's CPU in the Python column whichever process reaps it."""

from __future__ import annotations

import importlib.util
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")

BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"


def _bench():
    path = Path(__file__).parents[3] / "benchmarks" / "cep.py"
    spec = importlib.util.spec_from_file_location("bench_cep", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_counts_processes_that_end_and_puts_python_workers_reaped_by_another_process_in_python():
    bench = _bench()
    # a shell (as the JVM is to its Python workers: not Python) whose Python child already runs when counting
    # starts and ends before it stops, then short Python children that live and end between two samples
    # it then waits, its children reaped, until counting has sampled it twice more: what the tree did is in a
    # sample however slowly the machine runs (the root's own reaping of the shell is not followed)
    script = ("import subprocess, sys\n" + BURN.format(s=0.05) + "print('up', flush=True)\nsys.stdin.readline()\n"
              + BURN.format(s=0.4)
              + "for _ in range(8):\n    subprocess.run([sys.executable, '-c', %r])\n" % BURN.format(s=0.03)
              + "print('done', flush=True)\nsys.stdin.readline()\n")
    before = _children_cpu()
    shell = subprocess.Popen(["/bin/sh", "-c", f"{sys.executable} -c \"$0\"; exit 0", script],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert shell.stdout.readline().strip() == "up"
    counted = bench.TreeCpu(os.getpid())
    shell.stdin.write("go\n")
    shell.stdin.flush()
    assert shell.stdout.readline().strip() == "done"
    seen = counted.samples
    deadline = time.monotonic() + 120
    while counted.samples < seen + 2:
        assert time.monotonic() < deadline, "the counter took no sample in 120 s"
        time.sleep(0.05)
    shell.stdin.close()
    shell.wait()
    total, python = counted.stop()
    spent = _children_cpu() - before  # all of it, the time before counting began included
    # the Python workers' CPU: about 0.4 s after counting began, and 8 x (0.03 s + an interpreter's start)
    shown = f"counted {total:.2f} s, Python {python:.2f} s; the children spent {spent:.2f} s"
    assert python >= 0.6, shown
    assert python <= total <= spent + 0.1, shown  # /proc counts 10 ms ticks a process
    # what counting missed is at most the first child's time before it began (0.05 s burnt, its start-up)
    assert total >= spent - 0.05 - 0.5, shown



def test_a_process_with_the_pid_of_one_outside_the_tree_is_counted(monkeypatch):
    """A pid is reused (pid_max wraps in minutes on a busy machine): a Python worker born with the pid of a
    process seen outside the tree is counted (it was left out whole, with every worker forked under it). Here
    /proc shows one more pid (beyond pid_max): first another's process, then our child with its own start time."""
    bench = _bench()
    fake = 4_000_001
    phase = {"ours": False}
    real_listdir, real_stat = os.listdir, bench.TreeCpu._stat

    class Proc:  # os for the benchmark's module, /proc listing one more pid
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def listdir(path):
            names = real_listdir(path)
            return [*names, str(fake)] if path == "/proc" else names

    def stat(pid):
        if pid != fake:
            return real_stat(pid)
        if not phase["ours"]:
            return "python3", 1, 100, 50, 0  # (name, ppid, start, own ticks, reaped ticks): not ours
        return "python3", os.getpid(), 200, 100, 0  # our worker, 100 ticks of its own

    monkeypatch.setattr(bench, "os", Proc())
    monkeypatch.setattr(bench.TreeCpu, "_stat", staticmethod(stat))
    counted = bench.TreeCpu(os.getpid())
    phase["ours"] = True
    seen = counted.samples
    deadline = time.monotonic() + 120
    while counted.samples < seen + 2:
        assert time.monotonic() < deadline, "the counter took no sample in 120 s"
        time.sleep(0.05)
    total, python = counted.stop()
    assert python >= 100 / os.sysconf("SC_CLK_TCK") and total >= python
