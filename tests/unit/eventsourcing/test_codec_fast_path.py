"""Decoding makes events by filling their __dict__ when every field is given: the result must be the
event its constructor makes, and any other case must go through the constructor."""

from dataclasses import dataclass, field

import orjson
import pytest

from freshet.eventsourcing.events import Codec, Event, SchemaError


def stored(type_name: str, data, schema: int = 1) -> bytes:
    return orjson.dumps({"type": type_name, "schema": schema, "stream": "thing/1", "version": 3, "data": data})


codec = Codec()


@codec.register_event
@dataclass(frozen=True)
class Priced(Event):
    item: str
    cents: int
    tags: list = field(default_factory=list)


@codec.register_event
@dataclass(frozen=True)
class Checked(Event):
    amount: int

    def __post_init__(self) -> None:
        if self.amount < 0:
            raise TypeError("amount below zero")


def test_filled_events_equal_constructed_ones_and_stay_frozen():
    stream, version, event = codec.decode_stored(stored("Priced", {"item": "pen", "cents": 120, "tags": ["a"]}))
    assert (stream, version) == ("thing/1", 3)
    assert event == Priced("pen", 120, ["a"]) and repr(event) == repr(Priced("pen", 120, ["a"]))
    assert type(event) is Priced
    with pytest.raises(AttributeError):
        event.cents = 5  # frozen, as the constructor makes it


def test_missing_fields_take_defaults_and_unknown_fields_are_refused():
    assert codec.decode_stored(stored("Priced", {"item": "pen", "cents": 1}))[2] == Priced("pen", 1)
    with pytest.raises(SchemaError, match="unexpected keyword"):
        codec.decode_stored(stored("Priced", {"item": "pen", "cents": 1, "colour": "red"}))
    with pytest.raises(SchemaError, match="not a stored event"):
        codec.decode_stored(stored("Priced", ["pen", 1]))


def test_a_class_with_post_init_is_always_constructed():
    assert codec.decode_stored(stored("Checked", {"amount": 4}))[2] == Checked(4)
    with pytest.raises(SchemaError, match="amount below zero"):
        codec.decode_stored(stored("Checked", {"amount": -1}))
