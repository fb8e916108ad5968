"""The soak-length run of tests/replication/test_kill_leader.py's kill -9 loop: an idempotent acks=all producer
and a reader all along while the partition's leader is killed -9 and restarted ``--kills`` times (the test does it
three times); every acknowledged record is there once, in order, and the reader went through every leader change.

usage: python benchmarks/leader_kill_soak.py [--kills 20]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TEST = "tests/replication/test_kill_leader.py::test_no_acknowledged_record_is_lost_or_duplicated_while_the_leader_" \
       "is_killed_9_over_and_over"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20)
    args = ap.parse_args()
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TEST],
                         cwd=os.path.dirname(HERE), env={**os.environ, "FRESHET_LEADER_KILLS": str(args.kills)},
                         check=False)
    print(f"{args.kills} kills of the leader: {'passed' if run.returncode == 0 else 'FAILED'} "
          f"in {time.monotonic() - started:.0f} s")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
