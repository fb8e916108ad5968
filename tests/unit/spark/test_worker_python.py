"""The launcher Spark starts Python workers with keeps pip's pyspark.zip off their path and runs this
interpreter, so a worker imports PySpark from site-packages as the driver does."""

import os
import subprocess
import sys

from freshet.spark.session import worker_python


def test_the_worker_launcher_drops_pyspark_zip_and_keeps_the_rest_of_the_path(tmp_path):
    launcher = worker_python()
    assert os.access(launcher, os.X_OK)
    zip_path = "/opt/spark/python/lib/pyspark.zip"
    kept = [str(tmp_path / "a b"), "/opt/spark/python/lib/py4j-0.10.9.9-src.zip", str(tmp_path / "*")]
    env = {**os.environ, "PYTHONPATH": ":".join([zip_path, *kept])}
    out = subprocess.run([launcher, "-c", "import os, sys, pyspark; print(os.environ['PYTHONPATH']); "
                          "print(sys.executable); print(pyspark.__file__)"],
                         env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == ":".join(kept)  # spaces and glob characters kept as they were
    assert os.path.realpath(out[1]) == os.path.realpath(sys.executable)
    assert "pyspark.zip" not in out[2]


def test_the_launcher_is_written_once_per_interpreter_into_the_users_own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = worker_python()
    assert first.startswith(str(tmp_path / "freshet") + os.sep)
    assert worker_python() == first
    assert os.stat(tmp_path / "freshet").st_mode & 0o077 == 0


def test_a_launcher_someone_else_could_have_changed_is_written_anew(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = worker_python()
    with open(path, "w") as f:
        f.write("#!/bin/sh\necho taken over\n")
    assert worker_python() == path
    assert "taken over" not in open(path).read()
    os.chmod(path, 0o777)  # writable by others: not trusted, replaced
    assert worker_python() == path
    assert os.stat(path).st_mode & 0o022 == 0
