"""The class archive the tests' Spark JVMs map (freshet.testing.class_archive): made by one process at a time,
and harmless to a JVM that starts before it is there."""

import os
import shutil
import subprocess
import time

import pytest

from freshet.testing import class_archive


@pytest.fixture
def started(monkeypatch):
    """The processes make_in_background would start (none is started)."""
    calls = []
    monkeypatch.setattr(class_archive.subprocess, "Popen", lambda args, **kwargs: calls.append(args) or "process")
    return calls


def test_one_process_makes_the_archive_and_a_stale_lock_is_taken_over(tmp_path, started):
    path = str(tmp_path / "cds" / "spark.jsa")
    assert class_archive.make_in_background(path) == "process"
    assert started[-1][-1] == path and os.path.exists(f"{path}.lock")
    assert class_archive.make_in_background(path) is None  # another run is making it
    old = time.time() - class_archive.STALE_LOCK_S - 60
    os.utime(f"{path}.lock", (old, old))  # left by a run that was killed
    assert class_archive.make_in_background(path) == "process"
    os.remove(f"{path}.lock")
    with open(path, "wb"):
        pass
    assert class_archive.make_in_background(path) is None  # made
    assert len(started) == 2
    assert class_archive.wait_while_made(path, timeout=0)


def test_wait_while_made_returns_once_no_process_makes_the_archive(tmp_path):
    path = str(tmp_path / "spark.jsa")
    assert not class_archive.wait_while_made(path, timeout=60)  # no lock: nobody makes it, no wait
    open(f"{path}.lock", "w").close()
    assert not class_archive.wait_while_made(path, timeout=0.5)


@pytest.mark.skipif(shutil.which("java") is None, reason="no java")
@pytest.mark.parametrize("archive", ["missing", "not an archive"])
def test_a_jvm_whose_archive_is_missing_or_unreadable_runs_as_without_one(tmp_path, archive):
    path = tmp_path / "spark.jsa"
    if archive != "missing":
        path.write_text(archive)
    run = subprocess.run(["java", *class_archive.java_options(str(path)).split(), "-version"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "" and "cds" not in run.stderr and "archive" not in run.stderr, run.stdout + run.stderr
