"""Records in, rows out: what the SQL tests share."""

import itertools
import json
import sys
from contextlib import contextmanager

import pexpect
from confluent_kafka import Producer

from freshet.client.admin import TopicAdmin
from freshet.gen.access_logs import AccessLogGenerator
from freshet.testing.cli import freshet_argv

# the pipelines' own pattern (freshet.pipelines.access_logs.COMBINED) as a Spark SQL raw string
COMBINED = r'^(\S+) \S+ \S+ \[([^\]]+)\] "(\S+) (\S+)[^"]*" (\d{3}) (\d+|-) "([^"]*)" "([^"]*)"'


def produce(bootstrap: str, topic: str, values, keys=None, partitions: int = 2) -> int:
    TopicAdmin(bootstrap).create_topic(topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    count = 0
    for value, key in zip(values, keys if keys is not None else itertools.repeat(None)):
        value = value if isinstance(value, bytes) else (value.encode() if isinstance(value, str)
                                                         else json.dumps(value).encode())
        producer.produce(topic, value, key.encode() if isinstance(key, str) else key)
        count += 1
    assert producer.flush(30) == 0
    return count


def access_lines(n: int, seed: int = 7, rate_per_s: float = 5.0) -> list[str]:
    gen = AccessLogGenerator(seed=seed, users=40, rate_per_s=rate_per_s, start_ms=1_767_225_600_000)
    return [e.line for e in itertools.islice(gen.events(), n)]


def access_stream(name: str, topic: str) -> str:
    """CREATE STREAM for access-log lines: the raw line and the parsed fields as computed columns."""
    def group(i: int) -> str:
        return f"regexp_extract(line, r'{COMBINED}', {i})"

    return f"""CREATE STREAM {name} (
        line STRING,
        client_ip AS {group(1)},
        event_time AS to_timestamp({group(2)}, 'dd/MMM/yyyy:HH:mm:ss Z'),
        path AS {group(4)},
        status AS CAST({group(5)} AS INT),
        size AS CAST(CASE WHEN {group(6)} = '-' THEN '0' ELSE {group(6)} END AS BIGINT)
    ) WITH (topic='{topic}', format='raw', timestamp='event_time', watermark='2 minutes')"""


def latest(rows, key_width: int = 1) -> dict:
    """Update-mode rows -> the last value seen per key (the first ``key_width`` columns)."""
    out = {}
    for row in rows:
        out[tuple(row[:key_width])] = tuple(row[key_width:])
    return out


@contextmanager
def sql_in_a_pty(broker, tmp_path, *args):
    """`freshet sql ARGS` on a terminal of its own; it must end with exit status 0."""
    argv = freshet_argv("sql", *args, "--bootstrap", broker.bootstrap, "--spark-log", str(tmp_path / "spark.log"))
    child = pexpect.spawn(argv[0], argv[1:], encoding="utf-8", timeout=300, dimensions=(50, 200))
    child.logfile_read = sys.stdout
    try:
        yield child
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
