"""What a newcomer following README's first steps ran into: each command as README shows it."""

import os
import socket
import subprocess

from confluent_kafka.admin import AdminClient

from freshet.testing.cli import freshet, freshet_argv, one_line_error


def test_dashboard_on_a_port_in_use_is_one_line_and_exit_1():
    """uvicorn bound the port itself: the URL was announced, then an ERROR log line, exit status 3."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = freshet("dashboard", "--port", port, "--bootstrap", "127.0.0.1:1", timeout=120)
    line = one_line_error(run, f"cannot listen on 127.0.0.1:{port}")
    assert "in use" in line and "freshet dashboard on" not in run.stderr


def test_topic_describe_shows_each_partitions_replicas_and_isr(broker, topic_name):
    """kafka-topics --describe prints Leader, Replicas and Isr per partition; ours printed the leader only."""
    assert freshet(broker, "topic", "create", topic_name, "--partitions", "2").returncode == 0
    run = freshet(broker, "topic", "describe", topic_name)
    assert run.returncode == 0, run.stderr
    header = next(line for line in run.stdout.splitlines() if line.startswith("┃"))
    assert [c.strip() for c in header.strip("┃ ").split("┃")][:4] == ["partition", "leader", "replicas", "isr"]
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(topic_name, timeout=30)
    for index, p in metadata.topics[topic_name].partitions.items():
        row = next(line for line in run.stdout.splitlines() if line.startswith("│") and
                   line.strip("│ ").split("│")[0].strip() == str(index))
        cells = [c.strip() for c in row.strip("│ ").split("│")]
        assert cells[1:4] == [str(p.leader), ",".join(map(str, p.replicas)), ",".join(map(str, p.isrs))], row
        assert cells[2]  # a broker holds it


def test_every_client_command_takes_command_config_after_its_name(broker, topic_name, tmp_path):
    """README: 'Every client command takes --bootstrap and --command-config FILE'; only `freshet --command-config
    FILE topic list` worked, `freshet topic list --command-config FILE` (kafka-topics' place) was 'No such option'."""
    plaintext = tmp_path / "client.properties"
    plaintext.write_text("security.protocol=PLAINTEXT\n")
    assert freshet(broker, "topic", "create", topic_name).returncode == 0
    for args in (("topic", "list"), ("--command-config", plaintext, "topic", "list")):
        run = freshet(broker, *args, *(("--command-config", plaintext) if args[0] == "topic" else ()))
        assert run.returncode == 0 and f"{topic_name}\t1" in run.stdout.splitlines(), run.stderr
    missing = tmp_path / "missing.properties"
    for args in (("topic", "list"), ("groups", "describe", "g"), ("consume", topic_name, "--max", "1")):
        one_line_error(freshet(broker, *args, "--command-config", missing), "cannot read the command config",
                       str(missing))


def test_the_broker_leaves_no_hypothesis_directory_where_it_runs(tmp_path):
    """With Hypothesis installed (make demo's venv), `freshet broker start` left ./.hypothesis (kio registers
    Hypothesis strategies; Hypothesis caches Unicode tables in the working directory) in the user's directory."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_STORAGE_DIRECTORY"}
    with socket.socket() as busy:  # the broker imports everything, then stops at once: its port is taken
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        run = subprocess.run(freshet_argv("broker", "start", "--data-dir", tmp_path / "data", "--port",
                                          busy.getsockname()[1]),
                             cwd=work, env={**env, "HOME": str(home)}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "in use" in run.stderr, run.stderr
    assert list(work.iterdir()) == []


def test_topic_create_takes_a_replication_factor_as_kafka_topics_does(broker, topic_name):
    """kafka-topics --create --replication-factor N; ours had only --replica-assignment ('No such option')."""
    assert freshet(broker, "topic", "create", topic_name, "-p", "2", "--replication-factor", "1").returncode == 0
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(topic_name, timeout=30)
    assert [len(p.replicas) for p in metadata.topics[topic_name].partitions.values()] == [1, 1]
    for args, said in ((("--replication-factor", "2"), "replication factor 2"),
                       (("-r", "0"), "--replication-factor must be 1 or more"),
                       (("-r", "1", "--replica-assignment", "0"), "cannot be used with --replication-factor")):
        one_line_error(freshet(broker, "topic", "create", f"{topic_name}-x", *args), said)
    assert f"{topic_name}-x" not in freshet(broker, "topic", "list").stdout


def test_negative_counts_and_internal_topics_are_refused_in_one_line(broker, topic_name):
    """consume --max -1 and gen --seconds -1 / --count -1 printed or produced nothing and exited 0; deleting an
    internal topic said only 'Broker: Invalid request' (kafka-topics.sh names the internal topic)."""
    assert freshet(broker, "topic", "create", topic_name).returncode == 0
    one_line_error(freshet(broker, "consume", topic_name, "--from-beginning", "--max", "-1"), "--max must be 0")
    for args, said in ((("--seconds", "-1"), "--seconds must be 0 or more"),
                       (("--count", "-1"), "--count must be 0 or more")):
        one_line_error(freshet(broker, "gen", "access-logs", topic_name, *args), said)
    one_line_error(freshet(broker, "topic", "delete", "__consumer_offsets"), "__consumer_offsets is an internal topic")
    assert "__consumer_offsets\t1" in freshet(broker, "topic", "list").stdout.splitlines()
    assert freshet(broker, "consume", topic_name, "--from-beginning", "--max", "0").returncode == 0  # as Kafka's


def test_broker_start_on_a_port_in_use_is_one_line_and_creates_nothing(tmp_path):
    """The broker opened its data directory and logged its three internal topics being created, then failed to
    bind: four lines, and a data directory left behind."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = freshet("broker", "start", "--data-dir", tmp_path / "data", "--port", port, timeout=120)
    one_line_error(run, f"127.0.0.1:{port}", "in use")
    assert run.stdout == "" and not (tmp_path / "data").exists()


def test_the_readmes_kcat_group_commits_and_groups_describe_shows_it(broker, topic_name):
    """README's first steps: `kcat -G my-group clicks -e -q` then `freshet groups describe my-group`. A new group
    starts at the end (auto.offset.reset=latest, as on any Kafka broker): it read and committed nothing, and the
    table was empty. README's line now says earliest; the group then has read everything (lag 0)."""
    import shutil

    kcat = shutil.which("kcat")
    assert kcat, "kcat is missing: `make test` installs it (scripts/install-test-deps.sh)"
    assert freshet(broker, "topic", "create", topic_name, "--partitions", "3").returncode == 0
    assert freshet(broker, "produce", topic_name, input="".join(f"{i}\n" for i in range(60))).returncode == 0
    group = f"g-{topic_name}"
    subprocess.run([kcat, "-b", broker.bootstrap, "-G", group, topic_name, "-e", "-q",
                    "-X", "auto.offset.reset=earliest"], check=True, timeout=120, stdout=subprocess.DEVNULL)
    described = freshet(broker, "groups", "describe", group)
    assert described.returncode == 0, described.stderr
    rows = [line.strip("│ ").split("│") for line in described.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 3 and "total lag 0" in described.stdout, described.stdout  # one row a partition, all read
