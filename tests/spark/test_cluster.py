"""A Spark standalone cluster started by `freshet spark`: its status and bad input. A pipeline run with
`freshet run --master` that loses a worker (kill -9, executors with it) mid-stream and still writes every window
exactly once (test_end_to_end). The scenarios that run on both engines (windows, a join, CDC enrichment) are parametrized by the
`engine` fixture in their own modules."""

from freshet.testing.cli import freshet


def test_status_names_the_workers_the_connect_server_and_refuses_a_second_cluster(spark_cluster):
    where = ("--dir", spark_cluster.directory)
    status = freshet("spark", "status", *where)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0].startswith(f"master   {spark_cluster.master_url}") and "ALIVE" in lines[0]
    assert sum(line.startswith("worker") and " ALIVE " in line for line in lines) == 2
    assert any(line.startswith("app      freshet-connect  RUNNING  cores 2") for line in lines), status.stdout
    assert f"connect  {spark_cluster.connect_url}" in status.stdout
    for args in (("start-cluster", "--port", "0", "--ui-port", "0"), ("start-connect", "--port", "0")):
        again = freshet("spark", *args, *where)
        assert again.returncode == 1 and again.stderr.startswith("error: ") and "already runs" in again.stderr
        assert len(again.stderr.strip().splitlines()) == 1, again.stderr


def test_cluster_commands_refuse_bad_input_in_one_line(tmp_path):
    """No JVM starts for any of these."""
    cases = [
        (("spark", "status", "--dir", str(tmp_path)), "no Spark cluster is running"),
        (("spark", "stop-cluster", "--dir", str(tmp_path)), "no Spark cluster is running"),
        (("spark", "start-connect", "--dir", str(tmp_path)), "no Spark cluster is running"),
        (("spark", "start-cluster", "--workers", "0", "--dir", str(tmp_path)), "at least one worker"),
        (("spark", "start-cluster", "--dir", "/proc/no-such-dir"), "/proc/no-such-dir"),
        (("run", "requests-per-minute", "--from", "t", "--to", "console", "--master", "spark//x"), "--master must be"),
        (("run", "requests-per-minute", "--from", "t", "--to", "console", "--remote", "http://x:1"), "--remote must be"),
        (("run", "requests-per-minute", "--from", "t", "--to", "console", "--remote", "sc://127.0.0.1:1"),
         "cannot reach the Spark Connect server at 127.0.0.1:1"),
        (("run", "requests-per-minute", "--from", "t", "--to", "console", "--master", "spark://127.0.0.1:1"),
         "cannot reach the Spark master at 127.0.0.1:1"),
        (("run", "requests-per-minute", "--from", "t", "--to", "console", "--master", "local[2]", "--remote",
          "sc://127.0.0.1:1"), "exclude each other"),
        (("run", "requests-per-minute", "--from", "t", "--to", "console", "--spark-conf", "cores=2"), "spark.KEY=VALUE"),
    ]
    for args, needle in cases:
        r = freshet(*args, timeout=60)
        assert r.returncode == 1, (args, r)
        assert r.stderr.startswith("error: ") and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, (
            args, r.stderr)


def test_run_refuses_a_bad_master_remote_or_setting_before_it_imports_pyspark(tmp_path):
    """The engine's options are checked before the pipelines' imports (PySpark and pandas: seconds on a busy
    machine); here a PySpark that cannot be imported shows that none was imported."""
    fake = tmp_path / "pyspark"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('pyspark was imported')\n")
    env = {"PYTHONPATH": str(tmp_path)}
    for flags, needle in ((("--master", "spark//x"), "--master must be"),
                          (("--remote", "http://x:1"), "--remote must be"),
                          (("--remote", "sc://127.0.0.1:1"), "cannot reach the Spark Connect server"),
                          (("--spark-conf", "cores=2"), "spark.KEY=VALUE")):
        r = freshet("run", "requests-per-minute", "--from", "t", "--to", "console", *flags, env=env, timeout=60)
        assert r.returncode == 1 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, (flags, r.stderr)
    # and the fake stands in the way of a run that gets past them
    r = freshet("run", "requests-per-minute", "--from", "t", "--to", "console", env=env, timeout=60)
    assert r.returncode != 0 and "pyspark was imported" in r.stderr, r.stderr
