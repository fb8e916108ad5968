"""`freshet rules`, `freshet watch` and the generators as a user types them: stored in compacted topics,
bad input one line and exit 1 with nothing stored."""

from __future__ import annotations

import json

from freshet.client.stored import RULES_TOPIC, StoredDefinitions
from freshet.testing.cli import freshet, one_line_error


def test_rules_add_list_show_remove(broker, tmp_path, topic_name):
    name = topic_name.replace(".", "_")[-40:]
    rules = tmp_path / "mine.rules"
    rules.write_text(f"""-- two rules in one file
RULE {name}_a
PARTITION BY user
PATTERN (F{{3,}} S)
DEFINE F AS kind = 'login_failed', S AS kind = 'login_ok'
WITHIN 10 MINUTES

RULE {name}_b
PATTERN (P)
DEFINE P AS kind = 'p2p'
""")
    added = freshet(broker, "rules", "add", str(rules))
    assert added.returncode == 0, added.stderr
    assert f"added {name}_a: F{{3,}} S WITHIN 10 MINUTES" in added.stdout
    listed = freshet(broker, "rules", "list").stdout
    assert f"{name}_a" in listed and f"{name}_b" in listed
    shown = freshet(broker, "rules", "show", f"{name}_a").stdout
    assert "PATTERN (F{3,} S)" in shown
    assert freshet(broker, "rules", "remove", f"{name}_b").returncode == 0
    stored = StoredDefinitions(broker.bootstrap, RULES_TOPIC).refresh()
    assert f"{name}_a" in stored and f"{name}_b" not in stored
    one_line_error(freshet(broker, "rules", "remove", f"{name}_b"), "no ", f"{name}_b")
    one_line_error(freshet(broker, "rules", "show", "no-such-rule"), "no rule")


def test_a_bad_rule_stores_nothing(broker, tmp_path, topic_name):
    name = topic_name.replace(".", "_")[-40:]
    rules = tmp_path / "bad.rules"
    rules.write_text(f"RULE {name}_good\nPATTERN (A)\n\nRULE {name}_bad\nPATTERN (A*)\n")
    one_line_error(freshet(broker, "rules", "add", str(rules)), f"RULE {name}_bad", "can match no rows")
    assert f"{name}_good" not in StoredDefinitions(broker.bootstrap, RULES_TOPIC).refresh()
    one_line_error(freshet(broker, "rules", "add", str(tmp_path / "missing.rules")), "cannot read")
    one_line_error(freshet(broker, "rules", "add", "--set", "nonsense"), "no rule set", "intrusion")
    one_line_error(freshet(broker, "rules", "add"), "give a rules file")


def test_rules_try_matches_locally(broker, tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for e in [
        {"user": "ann", "kind": "login_failed", "event_time": i * 1000} for i in range(4)]
        + [{"user": "ann", "kind": "login_ok", "event_time": 5000},
           {"user": "ann", "kind": "password_change", "event_time": 6000}]))
    out = freshet(broker, "rules", "try", "-", str(events), bootstrap=False,
                  input=open(_fraud_rules()).read())
    assert out.returncode == 0, out.stderr
    matches = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(m["rule"], m["measures"]["user"], m["measures"]["failures"]) for m in matches] == [
        ("account_takeover", "ann", 4)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ok": 1}\nnot json\n')
    one_line_error(freshet(broker, "rules", "try", _fraud_rules(), str(bad), bootstrap=False), "bad.jsonl:2")


def _fraud_rules() -> str:
    from importlib import resources

    return str(resources.files("freshet.cep.rulesets").joinpath("fraud.rules"))


def test_watch_add_list_remove(broker, topic_name):
    query_id = f"w-{abs(hash(topic_name)) % 10**6}"
    added = freshet(broker, "watch", "add", "city = Delft AND price < 400000", "--id", query_id)
    assert added.returncode == 0 and f"added {query_id}" in added.stdout
    assert query_id in freshet(broker, "watch", "list").stdout
    assert freshet(broker, "watch", "remove", query_id).returncode == 0
    assert query_id not in freshet(broker, "watch", "list").stdout
    one_line_error(freshet(broker, "watch", "add", "city = "), "query:", "expected a value")
    one_line_error(freshet(broker, "watch", "add", "canal", "--id", "bad id!"), "--id")


def test_generators_plant_and_publish(broker, topic_name, tmp_path):
    from freshet.testing.topics import create_topic, read_to_end

    create_topic(broker.bootstrap, topic_name, 2)
    plan = tmp_path / "plan.jsonl"
    out = freshet(broker, "gen", "security-events", topic_name, "--count", "3000", "--attacks", "1",
                  "--plan", str(plan))
    assert out.returncode == 0, out.stderr
    planted = [json.loads(line) for line in plan.read_text().splitlines()]
    assert sorted(p["rule"] for p in planted) == ["brute_force", "http_scan", "p2p"]
    records = read_to_end(broker.bootstrap, topic_name, 2, "read_committed")
    assert len(records) >= 3000 and f"produced {len(records)} security events" in out.stderr
    listings_topic = topic_name + "-listings"
    create_topic(broker.bootstrap, listings_topic, 1)
    out = freshet(broker, "gen", "listings", listings_topic, "--count", "50")
    assert out.returncode == 0 and "produced 50 listings" in out.stderr
    one_line_error(freshet(broker, "gen", "listings", "no-such-topic-here", "--count", "5"), "no-such-topic-here")
