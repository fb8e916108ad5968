"""librdkafka's own integration tests against a Freshet cluster (issue #46): not part of ``make test``.

Builds librdkafka's test runner from a source tree (``--source``; e.g. what ``git archive`` of
github.com/confluentinc/librdkafka gives: ``./configure --disable-gssapi && make libs && make -C tests build``,
a few minutes on 2 cores, done once), starts a ``LocalCluster`` of ``--brokers`` brokers (three controllers, the
brokers' default replication factor min(3, brokers), ``--auto-create-topics --default-partitions 4``), writes the runner's ``test.conf`` (bootstrap.servers) and
runs each chosen test alone (``TESTS=NNNN ./test-runner -p1``, ``TEST_KAFKA_VERSION`` as given: the runner skips
what that version lacks), a deadline per test. Prints one line per test (passed / failed / timed out, seconds)
and writes them as JSON.

    python benchmarks/librdkafka_cluster.py --source /tmp/librdkafka [--tests 0103,0030,0113] [--brokers 3]
        [--kafka-version 3.9.0] [--timeout 600] [--out results.json] [--no-authorizer]

The brokers run an ACL authorizer with ``User:ANONYMOUS`` (every client of the test runner) as super user, so
nothing is refused but the admin tests' CreateAcls / DescribeAcls / DeleteAcls (0081) are answered as a secured
Kafka answers them (without an authorizer: SECURITY_DISABLED); ``--no-authorizer`` starts them without one.

The runner's own output for each test goes to ``<work>/NNNN.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from freshet.local.cluster import LocalCluster

DEFAULT_TESTS = "0103,0030,0113"


def build(source: str) -> str:
    """The test runner of ``source``, built if it is not there yet."""
    runner = os.path.join(source, "tests", "test-runner")
    if os.path.exists(runner):
        return runner
    jobs = str(os.cpu_count() or 2)
    steps = [["./configure", "--disable-gssapi"], ["make", "-j", jobs, "libs"],
             ["make", "-j", jobs, "-C", "tests", "build"]]
    if os.path.exists(os.path.join(source, "Makefile.config")):
        steps = steps[1:]  # configured already
    for step in steps:
        print("librdkafka:", " ".join(step), flush=True)
        done = subprocess.run(step, cwd=source, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            sys.exit(f"error: {' '.join(step)} failed in {source}:\n{done.stdout[-2000:]}")
    if not os.path.exists(runner):
        sys.exit(f"error: no {runner} after the build")
    return runner


def run_test(runner: str, test: str, bootstrap: str, version: str, work: str, timeout_s: float) -> dict:
    conf = os.path.join(work, "test.conf")
    with open(conf, "w") as f:
        f.write(f"bootstrap.servers={bootstrap}\n")
    source = os.path.dirname(os.path.dirname(runner))
    libraries = os.pathsep.join(filter(None, [os.path.join(source, "src"), os.path.join(source, "src-cpp"),
                                              os.environ.get("LD_LIBRARY_PATH")]))
    env = {**os.environ, "TESTS": test, "TEST_KAFKA_VERSION": version, "RDKAFKA_TEST_CONF": conf,
           "LD_LIBRARY_PATH": libraries}  # the librdkafka just built, as run-test.sh sets it
    log_path = os.path.join(work, f"{test}.log")
    started = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([runner, "-p1"], cwd=os.path.dirname(runner), env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout_s)
            outcome = "passed" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            outcome = f"timed out after {timeout_s:.0f} s"
    seconds = time.monotonic() - started
    with open(log_path, errors="replace") as f:
        tail = [line.rstrip() for line in f.readlines()[-400:]]
    reasons = [line for line in tail if "FAIL" in line or "SKIP" in line][-5:]
    return {"test": test, "outcome": outcome, "seconds": round(seconds, 1), "notes": reasons, "log": log_path}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="a librdkafka source tree")
    parser.add_argument("--tests", default=DEFAULT_TESTS, help="comma-separated test numbers")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--kafka-version", default="3.9.0", help="the broker version the runner is told")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per test")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--authorizer", action=argparse.BooleanOptionalAction, default=True,
                        help="brokers with an ACL authorizer, User:ANONYMOUS super user (the admin tests' ACLs)")
    args = parser.parse_args()
    source = os.path.abspath(args.source)
    if not os.path.isdir(os.path.join(source, "tests")):
        sys.exit(f"error: {source} is not a librdkafka source tree (no tests/)")
    runner = build(source)
    work = tempfile.mkdtemp(prefix="librdkafka-cluster-")
    results = []
    # librdkafka's tests produce to topics they never create (auto.create.topics.enable, Kafka's default; off by
    # default on a Freshet broker) and count on 4 partitions in them (num.partitions of trivup, their test clusters)
    broker_args = ["--auto-create-topics", "--default-partitions", "4"]
    if args.authorizer:
        broker_args += ["--authorizer", "--super-user", "User:ANONYMOUS"]
    with LocalCluster(args.brokers, directory=os.path.join(work, "cluster"), broker_args=broker_args) as cluster:
        for test in filter(None, (t.strip() for t in args.tests.split(","))):
            result = run_test(runner, test, cluster.bootstrap, args.kafka_version, work, args.timeout)
            results.append(result)
            print(f"{test}: {result['outcome']} in {result['seconds']} s ({result['log']})", flush=True)
            for note in result["notes"]:
                print("    " + note[:200], flush=True)
    passed = sum(r["outcome"] == "passed" for r in results)
    print(f"{passed} of {len(results)} passed against {args.brokers} brokers (librdkafka told Kafka "
          f"{args.kafka_version})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
