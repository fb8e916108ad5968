"""`freshet run cep` killed -9 mid-stream, then run to the end on the same checkpoint: every planted attack
alerts exactly once (state in the checkpoint's RocksDB store, alerts through the exactly-once topic sink)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from freshet.cep.matcher import event_time_ms
from freshet.cep.rulesets import ruleset
from freshet.cli.gen_cmd import recent_start_ms
from freshet.client.produce import produce_records
from freshet.client.stored import RULES_TOPIC, StoredDefinitions
from freshet.gen.security_events import security_events
from freshet.testing.crash import kill_mid_stream
from freshet.testing.topics import create_topic, read_to_end


# as the other kill -9 tests: kill_mid_stream's 480 s for a busy machine's driver start, then a restart of up to 600 s
@pytest.mark.timeout(1500)
def test_no_alert_lost_or_repeated_after_kill_9(own_broker, tmp_path):
    """A broker of its own: the rules live in the one rules topic (RULES_TOPIC) that ``run cep`` reads, which
    other tests on the shared broker fill with rules of theirs (each would be a source of extra alerts).

    Two batches of data (1600 records a trigger of ~3100): the first is committed, with state for the attacks
    it saw, when the kill lands, the second is in flight and is replayed by the final run, which also runs the
    batches that move the watermark past the last attacks. The cost is the two driver starts and the batches,
    not the records: 1000 a trigger made two more data batches (~10 s each at load 17-25) for no more coverage."""
    bootstrap = own_broker.bootstrap
    create_topic(bootstrap, "security-events", 3)
    create_topic(bootstrap, "alerts", 1)
    generated = security_events(3000, attacks=2, rate_per_s=10, seed=13, start_ms=recent_start_ms())
    produce_records(bootstrap, "security-events", (
        (e["src_ip"].encode(), json.dumps(e).encode(), event_time_ms(e["event_time"])) for e in generated.events))
    stored = StoredDefinitions(bootstrap, RULES_TOPIC)
    for rule in ruleset("intrusion"):
        stored.put(rule.name, rule.text)
    checkpoint = str(tmp_path / "ck")
    cmd = [sys.executable, "-m", "freshet.cli.main", "run", "cep", "--from", "security-events", "--to",
           "topic:alerts", "--checkpoint", checkpoint, "--lateness", "30 seconds", "--max-offsets-per-trigger",
           "1600", "--trigger-seconds", "0.5", "--spark-log", str(tmp_path / "spark.log"), "--bootstrap", bootstrap,
           "--spark-conf", "spark.sql.shuffle.partitions=2"]  # the tests' sessions' count, half of freshet run's
    assert kill_mid_stream(cmd, checkpoint, targets=(1,)) == 1
    final = subprocess.run(cmd + ["--available-now"], capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-3000:]
    alerts = [json.loads(v) for _, v in read_to_end(bootstrap, "alerts", 1, "read_committed")]
    assert sorted((a["rule"], next(iter(a["key"].values()))) for a in alerts) == sorted(
        (p.rule, p.host) for p in generated.planted)
