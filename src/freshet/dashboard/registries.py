"""Freshet's registry topics as the dashboard's tabs show them, one record at a time (issue 49).

Pipelines (``__freshet_pipelines``), event-sourced applications (``__freshet_applications``), ingest servers
(``__freshet_ingest``), CDC connectors (``__freshet_cdc_state``), stored rules and queries (``__freshet_rules``, ``__freshet_watches``) and the SQL catalog
(``__freshet_sql``) announce themselves in compacted topics, a JSON object per key. A ``Registry`` keeps each key's
latest record, read by one consumer that reads only what is new at each refresh, and decodes every record on its
own, as Redpanda Console and AKHQ decode each message of a topic: a record that does not decode (not JSON, not the
shape its tab reads, such as a writer of another version might leave, bytes framed with a schema id, a key that is
not UTF-8 or missing) is kept
as a mark naming its topic, partition, offset, key and why, in place of what its key held before, and every other
entry shows as it is. One bad record no longer empties a tab, nor stops the dashboard's round.
"""

from __future__ import annotations

import json

from freshet.client.reading import read_to_end, reader

MARKS_KEPT = 100  # undecodable records kept per topic (the latest ones)


class Undecodable(ValueError):
    """A record that is not what its tab reads (the message says why)."""


def an_object(value, what: str = "the value") -> dict:
    if not isinstance(value, dict):
        raise Undecodable(f"{what} is a JSON {type(value).__name__.replace('dict', 'object')}, not an object")
    return value


def has(value: dict, field: str, kinds: tuple, optional: bool = False) -> None:
    names = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number",
             type(None): "null"}
    if field not in value and optional:
        return
    x = value.get(field)
    if field not in value or not isinstance(x, kinds) or isinstance(x, bool) and bool not in kinds:
        wanted = " or ".join(names.get(k, k.__name__) for k in kinds)
        raise Undecodable(f"{field!r} is {'missing' if field not in value else json.dumps(x)[:40]}, not {wanted}")


def pipeline(key: str, value: dict) -> None:
    has(value, "status", (str,), optional=True)
    has(value, "progress", (dict, type(None)), optional=True)
    has(value, "dataflow", (list, type(None)), optional=True)


def application(key: str, value: dict) -> None:
    kind, _, rest = key.partition("/")
    if kind == "application":
        has(value, "events_topic", (str,))
        has(value, "partitions", (int,))
        has(value, "aggregates", (list, dict))
    elif kind == "projection":
        if "/" not in rest:
            raise Undecodable(f"the key {key!r} names no application and projection (projection/APP/NAME)")
        has(value, "positions", (dict,))
        positions = value["positions"]
        if not all(p.lstrip("-").isdigit() and isinstance(o, int) for p, o in positions.items()):
            raise Undecodable("'positions' is not partition -> offset")


def ingest_server(key: str, value: dict) -> None:
    has(value, "endpoints", (dict,))
    for name, endpoint in value["endpoints"].items():
        an_object(endpoint, f"endpoint {name!r}")
        has(endpoint, "received", (int, float))


def cdc_connector(key: str, value: dict) -> None:
    """A CDC connector's announcement (key ``cdc/NAME``); the state topic's other keys (a slot's snapshot state)
    are the connector's own and pass as they are."""
    if not key.startswith("cdc/"):
        return
    has(value, "slot", (str,))
    has(value, "topics", (list,))
    has(value, "slot_lag_bytes", (int, type(None)), optional=True)


def definition(key: str, value: dict) -> None:
    has(value, "text", (str,), optional=True)


def anything(key: str, value: dict) -> None:
    """A JSON object is all that is asked (the SQL catalog's entries are read field by field)."""


def decode(value: bytes):
    """The JSON a registry record holds; Undecodable saying what it holds instead."""
    if len(value) >= 5 and value[0] == 0:  # Confluent's wire format: a magic byte 0, then a 4-byte schema id
        raise Undecodable(f"framed with schema id {int.from_bytes(value[1:5], 'big')} (Confluent's wire format), "
                          "which no Freshet registry writes")
    try:
        text = value.decode()
    except UnicodeDecodeError as exc:
        raise Undecodable(f"not UTF-8 text: byte {exc.start} is {value[exc.start]:#04x}") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise Undecodable(f"not JSON: {exc}") from None


class Registry:
    """One registry topic's latest record per key, decoded record by record (see the module's docstring).
    ``shape(key, value)`` raises Undecodable for a JSON object its tab cannot show."""

    def __init__(self, bootstrap: str, topic: str, shape=anything) -> None:
        self.bootstrap, self.topic, self.shape = bootstrap, topic, shape
        self.entries: dict[str, dict] = {}
        self.marks: dict[str, dict] = {}  # key (or "@offset" where there is no readable key) -> its mark
        self._consumer = None
        self._position = -2

    def refresh(self, timeout_s: float = 5.0, topics=None) -> tuple[dict[str, dict], list[dict]]:
        """(key -> its latest record's JSON object, the undecodable latest records in offset order). ``topics``:
        the cluster's topic names if the caller has just read them (else they are asked for while the registry
        topic is not yet known to exist)."""
        if self._consumer is None:
            if topics is None:
                from freshet.client.admin import TopicAdmin

                topics = TopicAdmin(self.bootstrap).list_topics()
            if self.topic not in topics:
                return {}, []
            self._consumer = reader(self.bootstrap)
        ends = read_to_end(self._consumer, [(self.topic, 0, self._position)], self._take, timeout_s)
        self._position = ends[(self.topic, 0)]
        return dict(self.entries), sorted(self.marks.values(), key=lambda m: m["offset"])

    def _take(self, m) -> None:
        raw_key, value = m.key(), m.value()
        key = None
        try:
            if raw_key is None:
                raise Undecodable("the record has no key (a registry entry is named by its key)")
            try:
                key = raw_key.decode()
            except UnicodeDecodeError:
                raise Undecodable(f"the key is not UTF-8: {raw_key[:32].hex()}") from None
            if value is None:  # a tombstone: the entry is gone
                self.entries.pop(key, None)
                self.marks.pop(key, None)
                return
            decoded = decode(value)
            self.shape(key, an_object(decoded))
        except Undecodable as exc:
            self.entries.pop(key, None)
            self.marks[key if key is not None else f"@{m.offset()}"] = {
                "topic": self.topic, "partition": m.partition(), "offset": m.offset(),
                "key": key if key is not None else (None if raw_key is None else raw_key.decode("utf-8", "replace")),
                "size": len(value or b""), "error": str(exc)}
            if len(self.marks) > MARKS_KEPT:
                oldest = min(self.marks, key=lambda k: self.marks[k]["offset"])
                del self.marks[oldest]
            return
        self.marks.pop(key, None)
        self.entries[key] = decoded

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
