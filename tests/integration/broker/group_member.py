"""A consumer-group member as its own process (so a test can kill -9 it).

usage: group_member.py BOOTSTRAP TOPIC GROUP OUTFILE [classic|consumer]
Writes "partition offset value" per record, flushes, then commits synchronously; writes
"ASSIGNED p,p,..." whenever its assignment changes.
"""

import os
import sys

from confluent_kafka import Consumer


def main() -> None:
    bootstrap, topic, group, outfile = sys.argv[1:5]
    protocol = sys.argv[5] if len(sys.argv) > 5 else "classic"
    out = open(outfile, "a", buffering=1)
    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "fetch.queue.backoff.ms": 10}
    if protocol == "consumer":  # the broker sets session timeout and heartbeat interval (KIP-848)
        config["group.protocol"] = "consumer"
    else:
        config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer = Consumer(config)

    owned: set[int] = set()  # eager protocols hand over everything each time, KIP-848 increments

    def on_assign(c, partitions):
        owned.update(p.partition for p in partitions)
        out.write("ASSIGNED " + ",".join(str(p) for p in sorted(owned)) + "\n")

    def on_revoke(c, partitions):
        owned.difference_update(p.partition for p in partitions)

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    out.write(f"STARTED {os.getpid()}\n")
    while True:
        messages = consumer.consume(500, 0.2)
        good = [m for m in messages if m.error() is None]
        if not good:
            continue
        out.write("".join(f"{m.partition()} {m.offset()} {m.value().decode()}\n" for m in good))
        out.flush()
        os.fsync(out.fileno())
        consumer.commit(asynchronous=False)


if __name__ == "__main__":
    main()
