"""The freshet topic sink with exactlyOnce: a Spark driver killed -9 mid-stream again and again, then run to
the end on the same checkpoint; a read_committed reader sees each input record exactly once."""

import os
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, TopicPartition

from freshet.client.produce import produce_records
from freshet.testing.crash import kill_mid_stream
from freshet.testing.polling import wait_for
from freshet.testing.topics import create_topic, read_to_end

HERE = os.path.dirname(__file__)


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    return [value for _, value in read_to_end(bootstrap, topic, partitions, isolation)]


# a Spark driver started twice (once killed mid-stream): 20-60 s each on 2 quiet cores, minutes on a busy machine
@pytest.mark.timeout(1500)
def test_a_replayed_microbatch_is_not_written_again(broker, topic_name, tmp_path):
    source, sink = topic_name, f"{topic_name}-copy"
    create_topic(broker.bootstrap, source, 3)
    create_topic(broker.bootstrap, sink, 3)
    total = 9_000
    for p in range(3):
        produce_records(broker.bootstrap, source, ((None, b"%d" % i, None) for i in range(p, total, 3)), partition=p)
    checkpoint = str(tmp_path / "ck")
    cmd = [sys.executable, os.path.join(HERE, "topic_copy_driver.py"), broker.bootstrap, source, sink, checkpoint]
    assert kill_mid_stream(cmd, checkpoint, targets=(2,)) == 1
    final = subprocess.run(cmd + ["--available-now"], capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-3000:]
    copied = read_all(broker.bootstrap, sink, 3, "read_committed")
    assert len(copied) == total and sorted(copied) == sorted(b"%d" % i for i in range(total))

    def nothing_held_back() -> bool:  # a killed attempt's open transaction is aborted (re-run or timed out)
        ends = {isolation: Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ends", "log_level": 0,
                                     "isolation.level": isolation}) for isolation in ("read_committed",
                                                                                       "read_uncommitted")}
        try:
            return all(ends["read_committed"].get_watermark_offsets(TopicPartition(sink, p), 10)[1]
                       == ends["read_uncommitted"].get_watermark_offsets(TopicPartition(sink, p), 10)[1]
                       for p in range(3))
        finally:
            for consumer in ends.values():
                consumer.close()

    wait_for(nothing_held_back, 120, "the last stable offsets to reach the high watermarks", 1.0)
