"""The freshet command as a user types it."""

import pytest
from click.testing import CliRunner

from freshet.cli.run_cmd import run as run_command
from freshet.testing.cli import freshet


def test_topic_lifecycle_and_round_trip(broker, topic_name):
    r = freshet(broker, "topic", "create", topic_name, "--partitions", "6", "--config", "retention.ms=60000")
    assert r.returncode == 0, r.stderr
    listing = freshet(broker, "topic", "list")
    assert f"{topic_name}\t6" in listing.stdout
    r = freshet(broker, "produce", topic_name, input="".join(f"{i}\n" for i in range(1, 1001)))
    assert r.returncode == 0 and "produced 1000 records" in r.stderr
    out = freshet(broker, "consume", topic_name, "--from-beginning")
    assert out.returncode == 0
    assert sorted(int(x) for x in out.stdout.split()) == list(range(1, 1001))
    assert len(freshet(broker, "consume", topic_name, "--from-beginning", "--max", "7").stdout.split()) == 7
    described = freshet(broker, "topic", "describe", topic_name)
    assert "retention.ms" in described.stdout and "60000" in described.stdout
    assert "size" in described.stdout and " KiB" in described.stdout  # 1000 records on disk (DescribeLogDirs)
    assert freshet(broker, "topic", "delete", topic_name).returncode == 0
    assert topic_name not in freshet(broker, "topic", "list").stdout


def test_keys_partitions_and_offsets(broker, topic_name):
    freshet(broker, "topic", "create", topic_name, "--partitions", "2")
    r = freshet(broker, "produce", topic_name, "--key-separator", ":", "--partition", "1",
                input="alice:login\nbob:click\nno-separator\n")
    assert r.returncode == 0, r.stderr
    out = freshet(broker, "consume", topic_name, "--partition", "1", "--offset", "1", "--print-key", "--print-offset")
    assert out.stdout.splitlines() == ["1:1\tbob\tclick", "1:2\t\tno-separator"]
    past = freshet(broker, "consume", topic_name, "--from-time", "2999-01-01T00:00:00Z")
    assert past.returncode == 0 and past.stdout == ""
    recent = freshet(broker, "consume", topic_name, "--from-time", "2000-01-01T00:00:00Z")
    assert len(recent.stdout.splitlines()) == 3


def test_produce_is_idempotent_and_acks_all(broker, topic_name):
    """What a Kafka user expects of a console producer since Kafka 3.0: the batch carries a producer id and
    sequence numbers (the broker drops a retried duplicate), and the command ends once every record is written."""
    from freshet.format.record_batch import iter_batches
    from freshet.testing.raw_kafka import RawConnection, fetch

    freshet(broker, "topic", "create", topic_name)
    r = freshet(broker, "produce", topic_name, input="one\ntwo\n")
    assert r.returncode == 0 and "produced 2 records" in r.stderr, r.stderr
    with RawConnection(broker.bootstrap) as conn:
        part = fetch(conn, topic_name, 0, 0)
    headers = [header for header, _ in iter_batches(bytes(part.records))]
    assert part.high_watermark == 2 and sum(h.records_count for h in headers) == 2
    assert all(h.producer_id >= 0 and h.producer_epoch >= 0 for h in headers)
    assert headers[0].base_sequence == 0


@pytest.mark.parametrize("args, message", [
    (("consume", "no-such-topic", "--from-beginning"), "does not exist"),
    (("produce", "no-such-topic"), "does not exist"),
    (("topic", "create", "bad/name"), "invalid topic name"),
    (("topic", "create", "x", "--config", "retention.ms"), "name=value"),
    (("topic", "delete", "no-such-topic"), "does not exist"),
    (("consume", "{topic}", "--offset", "99"), "outside"),
    (("consume", "{topic}", "--from-time", "yesterday"), "ISO 8601"),
])
def test_bad_input_is_one_line_and_exit_1(broker, topic_name, args, message):
    freshet(broker, "topic", "create", topic_name)
    r = freshet(broker, *[a.format(topic=topic_name) for a in args], input="")
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr, r.stderr


def test_unreachable_broker_is_one_line():
    r = freshet("topic", "list", "--bootstrap", "127.0.0.1:1")
    assert r.returncode == 1 and r.stderr.startswith("error: cannot reach a broker")


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_groups_describe_lag_reset_and_watch(broker, topic_name, protocol):
    from confluent_kafka import Consumer

    from freshet.client import consumer_config

    group = "cli-" + topic_name[-20:]
    freshet(broker, "topic", "create", topic_name, "--partitions", "2")
    freshet(broker, "produce", topic_name, "--partition", "0", input="".join(f"{i}\n" for i in range(100)))
    consumer = Consumer(consumer_config(broker.bootstrap, group,
                                        {"group.protocol": "consumer"} if protocol == "consumer" else {}))
    consumer.subscribe([topic_name])
    got = 0
    while got < 100:
        got += len([m for m in consumer.consume(100, 0.5) if m.error() is None])
    consumer.commit(asynchronous=False)
    # an active group cannot be reset
    r = freshet(broker, "groups", "reset-offsets", group, "--topic", topic_name, "--to-earliest")
    assert r.returncode == 1 and "active member" in r.stderr
    consumer.close()
    assert f"{group}\tEMPTY\t{protocol}" in freshet(broker, "groups", "list").stdout
    described = freshet(broker, "groups", "describe", group)
    assert described.returncode == 0 and "total lag 0" in described.stdout and f"{protocol} protocol" in described.stdout
    r = freshet(broker, "groups", "reset-offsets", group, "--topic", topic_name, "--shift-by", "-30")
    assert r.returncode == 0 and f"{topic_name}\t0\t100 -> 70" in r.stdout
    assert "total lag 30" in freshet(broker, "groups", "describe", group).stdout
    calm = freshet(broker, "groups", "watch", group, "--max-lag", "50", "--count", "1")
    assert calm.returncode == 0 and "total lag 30" in calm.stdout
    alert = freshet(broker, "groups", "watch", group, "--max-lag", "10", "--count", "3", "--interval", "0.1")
    assert alert.returncode == 2 and "ALERT" in alert.stdout
    r = freshet(broker, "groups", "reset-offsets", group, "--topic", topic_name, "--to-earliest")
    assert f"{topic_name}\t0\t70 -> 0" in r.stdout
    assert freshet(broker, "groups", "describe", "no-such-group").returncode == 1


def test_run_unknown_pipeline_is_one_line(broker):
    r = freshet(broker, "run", "no-such-pipeline", "--from", "x", "--to", "console")
    assert r.returncode == 1 and "unknown pipeline" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_run_refuses_what_it_can_before_spark_starts(broker, topic_name):
    freshet(broker, "topic", "create", topic_name, "--partitions", "2")
    base = ["run", "requests-per-minute", "--from", topic_name, "--to", "console"]
    refused = {
        "unknown sink 'bogus'": ["run", "requests-per-minute", "--from", topic_name, "--to", "bogus"],
        "parquet sink needs a path": ["run", "requests-per-minute", "--from", topic_name, "--to", "parquet:"],
        "postgres sink needs a table": ["run", "requests-per-minute", "--from", topic_name, "--to", "postgres:t"],
        "topic(s) no-such-topic-x do not exist": ["run", "requests-per-minute", "--from", "no-such-topic-x", "--to",
                                                  "console"],
        "output topic no-such-out-x does not exist": ["run", "requests-per-minute", "--from", topic_name, "--to",
                                                      "topic:no-such-out-x"],
        "click-through reads two topics": ["run", "click-through", "--from", topic_name, "--to", "console"],
        "the trigger interval must be positive": [*base, "--trigger-seconds", "-1"],
        "max offsets per trigger must be at least 1": [*base, "--max-offsets-per-trigger", "0"],
        "starting offsets must be earliest, latest or JSON": [*base, "--starting-offsets", "garbage"],
        "lateness must be an interval like '2 minutes'": [*base, "--lateness", "abc"],
        "postgres:public.rpm: give the table without a schema": ["run", "requests-per-minute", "--from", topic_name,
                                                                "--to", "postgres:public.rpm", "--pg-dsn", "x"],
        "cannot connect to PostgreSQL: connection to server at \"127.0.0.1\", port 1 failed": [
            "run", "requests-per-minute", "--from", topic_name, "--to", "postgres:rpm",
            "--pg-dsn", "host=127.0.0.1 port=1 dbname=x"],
    }
    # in this process (click's runner): a `freshet run` process per refusal would import PySpark and pandas each
    # time for nothing; the last refusal below is a process, as a user sees it
    for message, args in refused.items():
        r = CliRunner().invoke(run_command, [*args[1:], "--bootstrap", broker.bootstrap])
        assert r.exit_code == 1 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.output)
    unreachable = freshet(*base, "--bootstrap", "127.0.0.1:1")
    assert unreachable.returncode == 1 and "cannot reach a broker at 127.0.0.1:1" in unreachable.stderr
    assert len(unreachable.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("flags, said", [
    (["--consumer-heartbeat-interval-ms", "0"], "--consumer-heartbeat-interval-ms must be positive"),
    (["--consumer-session-timeout-ms", "1000", "--consumer-heartbeat-interval-ms", "5000"], "below"),
    (["--consumer-session-timeout-ms", "10"], "at least 100"),
    (["--telemetry-push-interval-ms", "-1"], "must not be negative"),
])
def test_broker_start_refuses_bad_group_and_telemetry_settings(tmp_path, flags, said):
    r = freshet("broker", "start", "--data-dir", tmp_path, "--port", "0", *flags)
    assert r.returncode == 1 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1
