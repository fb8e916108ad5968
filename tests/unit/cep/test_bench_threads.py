"""benchmarks/cep.py's split of the Spark JVM's CPU by thread: a task thread between tasks (the name /proc shows for
it then, "Executor task i...") is a task thread, as while it runs one; the rest are named without their digits."""

from __future__ import annotations

from .test_bench_cpu import _bench


def test_jvm_threads_are_told_apart_by_name():
    kind = _bench().TreeCpu.thread_kind
    assert [kind(n) for n in ("Executor task l", "Executor task i", "C2 CompilerThre", "G1 Conc#0", "stream executio")] \
        == ["tasks", "tasks", "jit", "gc", "stream thread"]
    assert [kind(n) for n in ("rocksdb:low0", "Thread-12", "shuffle-client-4")] == \
        ["other: rocksdb:low", "other: Thread", "other: shuffle-client"]
