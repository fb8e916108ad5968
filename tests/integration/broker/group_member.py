"""A consumer-group member as its own process (so a test can kill -9 it).

usage: group_member.py BOOTSTRAP TOPIC GROUP OUTFILE
Writes "partition offset value" per record, flushes, then commits synchronously; writes
"ASSIGNED p,p,..." whenever its assignment changes.
"""

import os
import sys

from confluent_kafka import Consumer


def main() -> None:
    bootstrap, topic, group, outfile = sys.argv[1:5]
    out = open(outfile, "a", buffering=1)
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
        "fetch.queue.backoff.ms": 10,
    })

    def on_assign(c, partitions):
        out.write("ASSIGNED " + ",".join(str(p.partition) for p in partitions) + "\n")

    consumer.subscribe([topic], on_assign=on_assign)
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
