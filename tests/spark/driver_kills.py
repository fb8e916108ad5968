"""kill -9 a Spark driver mid-stream, again and again, then let it finish on the same checkpoint."""

import glob
import os
import signal
import subprocess
import time


def committed_batches(checkpoint: str) -> int:
    return len([f for f in glob.glob(os.path.join(checkpoint, "commits", "*")) if os.path.basename(f).isdigit()])


def kill_mid_stream(cmd: list[str], checkpoint: str, targets=(3, 8, 13), env=None) -> int:
    """Start ``cmd`` and SIGKILL it once ``target`` batches are committed, for each target; returns the
    number of kills. A batch is usually in flight when the signal lands."""
    kills = 0
    for target in targets:
        driver = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 240
        while committed_batches(checkpoint) < target and time.monotonic() < deadline:
            assert driver.poll() is None, "the driver died on its own"
            time.sleep(0.2)
        assert committed_batches(checkpoint) >= target, "the driver made no progress"
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        kills += 1
    return kills
