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


@pytest.mark.timeout(900)
def test_no_alert_lost_or_repeated_after_kill_9(own_broker, tmp_path):
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
           "1000", "--trigger-seconds", "0.5", "--spark-log", str(tmp_path / "spark.log"), "--bootstrap", bootstrap]
    assert kill_mid_stream(cmd, checkpoint, targets=(1,)) == 1
    final = subprocess.run(cmd + ["--available-now"], capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-3000:]
    alerts = [json.loads(v) for _, v in read_to_end(bootstrap, "alerts", 1, "read_committed")]
    assert sorted((a["rule"], next(iter(a["key"].values()))) for a in alerts) == sorted(
        (p.rule, p.host) for p in generated.planted)
