"""The data flow as one graph: topics, and what writes and reads them (ingest endpoints, pipelines, consumer and
share groups, event-sourced projections), each edge with its live rate (records/s) and, where there is one, its
lag; built from the collector's snapshot, nothing more.

Nodes: ``{"id", "kind", "label", "link"}`` (kind: topic, ingest, cdc, pipeline, sql, group, share-group, webhook, projection, sink;
``link``: the page's tab and item). Edges: ``{"from", "to", "rate", "lag"}`` (rate or lag None when not known).
Where an edge comes from:

- ingest endpoint -> topic: the records/s the endpoint accepted (its announcements);
- topic -> consumer group: the records/s the group commits on that topic, and its lag there; a ``freshet webhook``
  sink's group (``freshet-webhook-TOPIC``, its default) is drawn as a webhook, with an edge on to its dead-letter
  topic (``TOPIC.dead-letter``) carrying that topic's produce rate;
- topic -> share group: the backlog (records not yet acknowledged);
- topic -> pipeline -> topic / table / files: a pipeline's ``--from`` and ``--to`` as ``freshet run`` was started
  (the registry keeps the command); the edge in carries the pipeline's input rows/s, the edge out to a topic that
  topic's produce rate;
- events topic -> projection: the projection's lag;
- CDC connector -> topic: each change topic the connector writes (``__freshet_cdc_state``), with that topic's produce
  rate; the node's label carries the replication slot's lag in bytes;
- topic -> SQL query -> topic: a persistent query of ``freshet sql`` (CSAS/CTAS, from the ``__freshet_sql``
  catalog): the topics of the streams and tables its statement reads (FROM and JOIN) in, its sink's topic out; the
  edge in carries the query's input rows/s (the runner's reporter announces it under the query's id), the edge out
  the sink topic's produce rate.
"""

from __future__ import annotations

import re

WEBHOOK_GROUP = "freshet-webhook-"  # `freshet webhook`'s consumer group, unless --group names another (ingest/webhook.py)
_SOURCE = re.compile(r"\b(?:FROM|JOIN)\s+([`\"]?)([A-Za-z_]\w*)\1", re.IGNORECASE)
_LITERAL_OR_COMMENT = re.compile(r"'(?:[^']|'')*'|--[^\n]*|/\*.*?\*/", re.DOTALL)


def sql_sources(statement: str, sources: dict) -> list[str]:
    """The streams and tables (names of the catalog ``sources``, lower-cased) a statement reads after FROM or
    JOIN, in order, once each; string literals and comments skipped."""
    found = []
    for _, name in _SOURCE.findall(_LITERAL_OR_COMMENT.sub(" ", statement)):
        if name.lower() in sources and name.lower() not in found:
            found.append(name.lower())
    return found


def _option(command: list, name: str) -> str | None:
    """``--name VALUE`` or ``--name=VALUE`` in a CLI command."""
    for i, arg in enumerate(command):
        if arg == name and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith(name + "="):
            return arg[len(name) + 1:]
    return None


def graph(snap) -> dict:
    nodes: dict[str, dict] = {}
    edges: list[dict] = []

    def node(node_id: str, kind: str, label: str, link: dict | None = None) -> str:
        nodes.setdefault(node_id, {"id": node_id, "kind": kind, "label": label, "link": link})
        return node_id

    def topic(name: str) -> str:
        return node(f"topic:{name}", "topic", name, {"tab": "topic", "topic": name})

    def edge(a: str, b: str, rate: float | None = None, lag: int | None = None) -> None:
        edges.append({"from": a, "to": b, "rate": rate, "lag": lag})

    for name, t in snap.topics.items():
        if not t.get("internal"):
            topic(name)
    for server, info in snap.ingest.items():
        for endpoint, e in (info.get("endpoints") or {}).items():
            if e.get("topic"):
                source = node(f"ingest:{server}/{endpoint}", "ingest", f"{server} {endpoint}", {"tab": "ingest"})
                edge(source, topic(e["topic"]), e.get("rate"))
    for name, c in (getattr(snap, "cdc", None) or {}).items():
        db = c.get("database") or {}
        lag = c.get("slot_lag_bytes")
        source = node(f"cdc:{name}", "cdc", f"{name}" + (f" slot lag {lag} B" if lag is not None else "")
                      + f" @ {db.get('host') or ''}/{db.get('dbname') or ''}", {"tab": "cdc", "connector": name})
        for written in c.get("topics") or []:
            edge(source, topic(written), snap.topics.get(written, {}).get("rate_in"))
    for group_id, g in snap.groups.items():
        share = g.get("type") == "share"
        webhook = group_id.startswith(WEBHOOK_GROUP) and not share
        reader = node(f"group:{group_id}", "webhook" if webhook else "share-group" if share else "group",
                      f"webhook of {group_id[len(WEBHOOK_GROUP):]}" if webhook else group_id,
                      {"tab": "groups", "group": group_id})
        dead_letter = f"{group_id[len(WEBHOOK_GROUP):]}.dead-letter"
        if webhook and dead_letter in snap.topics:  # what the receiver refused, or never took
            edge(reader, topic(dead_letter), snap.topics[dead_letter].get("rate_in"))
        lags: dict[str, int] = {}
        for p in g.get("partitions", []):
            lags[p["topic"]] = lags.get(p["topic"], 0) + (p.get("backlog", 0) if share else max(p.get("lag", 0), 0))
        for name, lag in sorted(lags.items()):
            if not name.startswith("__"):
                edge(topic(name), reader, None if share else (g.get("rates") or {}).get(name, 0.0), lag)
    sql = getattr(snap, "sql", None) or {}
    queries = sql.get("queries") or {}
    for query_id, q in queries.items():
        announced = snap.pipelines.get(query_id) or {}
        running = q.get("status") == "RUNNING" and announced.get("status") == "running"
        status = q.get("status", "?") if q.get("status") != "RUNNING" else announced.get("status", "starting")
        node_id = node(f"sql:{query_id}", "sql", f"{query_id} ({status.lower()})",
                       {"tab": "pipelines", "pipeline": query_id})
        inputs = [sql["sources"][n]["topic"] for n in sql_sources(q.get("sql", ""), sql.get("sources") or {})]
        rate = (announced.get("progress") or {}).get("input_rows_per_second") if running else 0.0
        for source in inputs:
            edge(topic(source), node_id, round(rate / len(inputs), 1) if rate is not None else None)
        if q.get("topic"):
            edge(node_id, topic(q["topic"]), snap.topics.get(q["topic"], {}).get("rate_in") if running else 0.0)
    for name, p in snap.pipelines.items():
        if name in queries:  # a SQL query's reporter entry: drawn above, with its statement's topics
            continue
        command = p.get("command") or []
        progress = p.get("progress") or {}
        running = p.get("status") == "running"
        label = f"{name} ({p.get('status', '?')})"
        pipe = node(f"pipeline:{name}", "pipeline", label, {"tab": "pipelines", "pipeline": name})
        inputs = [x.strip() for x in (_option(command, "--from") or "").split(",") if x.strip()]
        for source in inputs:
            rate = progress.get("input_rows_per_second") if running else 0.0
            edge(topic(source), pipe, round(rate / len(inputs), 1) if rate is not None else None)
        sink = _option(command, "--to")
        if sink:
            kind, _, where = sink.partition(":")
            if kind == "topic" and where:
                out = topic(where)
                edge(pipe, out, snap.topics.get(where, {}).get("rate_in") if running else 0.0)
            else:
                edge(pipe, node(f"sink:{sink}", "sink", sink), progress.get("processed_rows_per_second")
                     if running else 0.0)
    for app_name, app in snap.applications.items():
        events = app.get("events_topic")
        for projection, view in (app.get("projections") or {}).items():
            target = node(f"projection:{app_name}/{projection}", "projection", f"{app_name} {projection}",
                          {"tab": "applications"})
            edge(topic(events), target, None, view.get("lag"))
    return {"nodes": list(nodes.values()), "edges": edges}
