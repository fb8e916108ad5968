"""The long crash run: an idempotent, acks=all producer writes numbered records to 6 partitions
while the broker is SIGKILLed at random moments and restarted (--kills, at least 20), with a torn
write appended to a random partition's active segment on every other restart. Afterwards every
acknowledged record must be stored exactly once and in per-partition order. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import random
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from freshet.client import producer_config
from freshet.local import BrokerProcess
from freshet.log import encode_batch
from freshet.testing.crash import read_everything, verify_exactly_once_in_order


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    broker = BrokerProcess().start()
    topic = "crash-loop"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 6)])[topic].result(30)
    acked: list[bytes] = []
    failed: list = []
    done = threading.Event()

    def produce() -> None:
        producer = Producer(producer_config(broker.bootstrap, {"message.timeout.ms": 300000, "log_level": 0}))

        def on_delivery(err, msg):
            (failed if err else acked).append(err or msg.value())

        i = 0
        while not done.is_set():
            try:
                producer.produce(topic, b"%010d" % i, partition=i % 6, on_delivery=on_delivery)
                i += 1
            except BufferError:
                producer.poll(0.05)
            if i % 200 == 0:
                producer.poll(0.002)
        producer.flush(300)

    writer = threading.Thread(target=produce)
    writer.start()
    torn_writes = 0
    start = time.monotonic()
    try:
        for k in range(args.kills):
            time.sleep(rng.uniform(0.2, 1.5))
            broker.kill()
            if k % 2:
                p = rng.randrange(6)
                segments = sorted(glob.glob(os.path.join(broker.data_dir, "topics", topic, str(p), "*.log")))
                torn = encode_batch([(b"k", b"torn" * 100, 1)])
                with open(segments[-1], "ab") as f:
                    f.write(torn[: rng.randrange(1, len(torn))])
                torn_writes += 1
            broker.start()
        time.sleep(1)
        done.set()
        writer.join(600)
        stored = read_everything(broker.bootstrap, topic, 6)
        report = verify_exactly_once_in_order(stored, acked)
        print(json.dumps({"result": "crash_loop", "kills": args.kills, "torn_writes": torn_writes,
                          "delivery_failures": len(failed), "seconds": round(time.monotonic() - start, 1),
                          **report, "machine": f"{platform.machine()} {os.cpu_count()} cores",
                          "date": time.strftime("%Y-%m-%d")}), flush=True)
        if report["lost"] or report["duplicates"] or report["out_of_order"]:
            raise SystemExit(1)
    finally:
        done.set()
        del admin
        broker.close()


if __name__ == "__main__":
    main()
