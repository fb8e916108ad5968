"""Events and commands as versioned data classes, and the codec that stores them in the log.

An event class is a frozen dataclass deriving from ``Event``. Its ``schema`` (a class attribute, 1 by
default) is stored with every event; when a class changes shape, raise ``schema`` and register an
*upcaster* that turns the stored dict of the old schema into the next one. Old events are never
rewritten: they are upcast as they are read, in every replay.

Fields holding personal data are declared with ``personal()``; the class names the field that says whose
data it is (``subject = "student_id"``). The codec encrypts those fields with the subject's key
(crypto-shredding, see ``keys``); once the key is forgotten they read as ``FORGOTTEN``.

Stored form (JSON, one record per event; the record key is the aggregate's stream key)::

    {"type": "Enrolled", "schema": 2, "stream": "course/c1", "version": 7,
     "data": {"student_id": "s1", "name": {"key": "s1/4f..", "sealed": "base64(nonce|ciphertext)"}}}
"""

from __future__ import annotations

import binascii
import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol

import orjson

FORGOTTEN = "<forgotten>"
SEALED = "<sealed>"  # a personal field a replay of aggregates did not open (apply must not depend on them)


def personal(**kwargs) -> Any:
    """A dataclass field holding personal data: stored encrypted with its subject's key."""
    return dataclasses.field(metadata={"personal": True}, **kwargs)


class Event:
    """Base of every event class (subclasses are frozen dataclasses)."""

    schema: ClassVar[int] = 1
    subject: ClassVar[str | None] = None  # the field naming whose personal data this event carries


class Command:
    """Base of every command class (subclasses are frozen dataclasses). Personal fields are declared as in
    events (``personal()`` and ``subject``): the client seals them with the subject's key before the command
    is appended to the commands topic, so forgetting the subject shreds them there too."""

    subject: ClassVar[str | None] = None  # the field naming whose personal data this command carries


class Sealer(Protocol):
    """What the codec needs from a key store: seal a value for a subject, open it again (or None)."""

    def seal(self, subject: str, plaintext: bytes) -> dict: ...

    def open(self, sealed: dict) -> bytes | None: ...


class SchemaError(ValueError):
    """A stored event or command this codec cannot read (unknown type, schema from the future, bad JSON)."""


class RecordedEvent(NamedTuple):
    """An event as the log holds it: which stream, at which version, where, when. (A named tuple: replays
    make one per event, and a tuple is made in a third of a frozen dataclass's time.)"""

    stream: str
    version: int
    event: Event
    partition: int = -1
    offset: int = -1
    timestamp_ms: int = -1

    @property
    def aggregate_type(self) -> str:
        return self.stream.split("/", 1)[0]

    @property
    def aggregate_id(self) -> str:
        return self.stream.split("/", 1)[1]


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _plain_fields(cls: type) -> frozenset[str] | None:
    """The field names of a dataclass whose instances may be made by filling ``__dict__`` (what a frozen
    dataclass's ``__init__`` does, one ``object.__setattr__`` at a time): no ``__post_init__``, no slots,
    no init=False fields. None for any other class."""
    fields = dataclasses.fields(cls)
    if hasattr(cls, "__post_init__") or hasattr(cls, "__slots__") or not all(f.init for f in fields):
        return None
    return frozenset(f.name for f in fields)


@functools.cache
def _personal_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("personal"))


class Codec:
    """Encodes and decodes the event and command classes registered with it, upcasting old schemas."""

    def __init__(self) -> None:
        self.events: dict[str, type[Event]] = {}
        self._decoding: dict[str, tuple] = {}
        self.commands: dict[str, type[Command]] = {}
        self._upcasters: dict[tuple[str, int], Callable[[dict], dict]] = {}

    # registration ----------------------------------------------------------------------------------
    def register_event(self, cls: type[Event]) -> type[Event]:
        if not dataclasses.is_dataclass(cls) or not issubclass(cls, Event):
            raise TypeError(f"{cls.__name__}: an event is a dataclass deriving from Event")
        personal_fields = _check_subject(cls)
        self.events[cls.__name__] = cls
        # what decoding needs of the class, looked up once per event: class, schema, personal fields, and
        # the field names when an instance may be made by filling its __dict__ (see _plain_fields)
        self._decoding[cls.__name__] = (cls, cls.schema, personal_fields, _plain_fields(cls))
        return cls

    def register_command(self, cls: type[Command]) -> type[Command]:
        if not dataclasses.is_dataclass(cls) or not issubclass(cls, Command):
            raise TypeError(f"{cls.__name__}: a command is a dataclass deriving from Command")
        _check_subject(cls)
        self.commands[cls.__name__] = cls
        return cls

    def upcaster(self, type_name: str, from_schema: int) -> Callable[[Callable[[dict], dict]], Callable[[dict], dict]]:
        """Register ``f(data) -> data`` turning schema ``from_schema`` of ``type_name`` into the next one."""

        def register(f: Callable[[dict], dict]) -> Callable[[dict], dict]:
            self._upcasters[(type_name, from_schema)] = f
            return f

        return register

    # events ----------------------------------------------------------------------------------------
    def encode_event(self, stream: str, version: int, event: Event, sealer: Sealer | None = None) -> bytes:
        cls = type(event)
        if self.events.get(cls.__name__) is not cls:
            raise SchemaError(f"event class {cls.__name__} is not registered")
        data = _sealed(cls, {name: getattr(event, name) for name in _field_names(cls)}, sealer)
        return orjson.dumps({"type": cls.__name__, "schema": cls.schema, "stream": stream, "version": version,
                             "data": data})

    def decode_event(self, value: bytes, sealer: Sealer | None = None, partition: int = -1, offset: int = -1,
                     timestamp_ms: int = -1, open_personal: bool = True) -> RecordedEvent:
        """The stored event, upcast to its class's schema. Personal fields are opened with ``sealer`` (or read
        FORGOTTEN); with ``open_personal=False`` they read SEALED, unopened: replays of aggregate state
        skip the decryption, since state must not depend on what forgetting can take away."""
        return RecordedEvent(*self.decode_stored(value, sealer, open_personal), partition, offset, timestamp_ms)

    def decode_events(self, values: list[bytes], sealer: Sealer | None, partition: int, offsets: list[int],
                      timestamps_ms: list[int]) -> list[RecordedEvent]:
        """``decode_event`` of many records of one partition: the same events, with what is looked up per
        event bound once (a projection's rebuild decodes every event of the log)."""
        out = []
        append, loads, decoding, new = out.append, orjson.loads, self._decoding, object.__new__
        open_sealed = sealer.open if sealer is not None else (lambda sealed: None)
        for value, offset, timestamp_ms in zip(values, offsets, timestamps_ms):
            try:
                doc = loads(value)
                type_name, schema, data = doc["type"], doc["schema"], doc["data"]
                known = decoding[type_name]
                cls, current, personal_fields, plain = known
                for name in personal_fields:
                    sealed = data.get(name)
                    if type(sealed) is dict:
                        plaintext = open_sealed(sealed)
                        data[name] = FORGOTTEN if plaintext is None else loads(plaintext)
                if schema == current and data.keys() == plain:  # every field and nothing else: fill __dict__
                    event = new(cls)
                    event.__dict__.update(data)
                    append(RecordedEvent(doc["stream"], doc["version"], event, partition, offset, timestamp_ms))
                    continue
            except (ValueError, KeyError, TypeError, AttributeError):
                pass  # decode_event says what is wrong with it
            append(self.decode_event(value, sealer, partition, offset, timestamp_ms))
        return out

    def decode_stored(self, value: bytes, sealer: Sealer | None = None,
                      open_personal: bool = True) -> tuple[str, int, Event]:
        """(stream, version, event) of a stored event: ``decode_event`` without the record's place."""
        try:
            doc = orjson.loads(value)
            type_name, schema, data = doc["type"], doc["schema"], doc["data"]
            stream, version = doc["stream"], doc["version"]
            if not isinstance(data, dict):
                raise TypeError(f"data is {type(data).__name__}, not an object")
        except (ValueError, KeyError, TypeError) as exc:
            raise SchemaError(f"not a stored event: {exc}") from None
        known = self._decoding.get(type_name)
        if known is None:
            raise SchemaError(f"unknown event type {type_name!r}")
        cls, current, personal_fields, plain = known
        for name in personal_fields:
            sealed = data.get(name)
            if isinstance(sealed, dict):
                if not open_personal:
                    data[name] = SEALED
                    continue
                plaintext = sealer.open(sealed) if sealer is not None else None
                data[name] = FORGOTTEN if plaintext is None else orjson.loads(plaintext)
        if schema != current:
            data = self._upcast(type_name, schema, current, data)
        if plain is not None and data.keys() == plain:  # every field and nothing else: fill its __dict__
            event = object.__new__(cls)
            event.__dict__.update(data)
        else:
            try:
                event = cls(**data)
            except TypeError as exc:
                raise SchemaError(f"{type_name} schema {schema}: {exc} (is an upcaster missing?)") from None
        return stream, version, event

    def _upcast(self, type_name: str, schema: int, current: int, data: dict) -> dict:
        if schema > current:
            raise SchemaError(f"{type_name} schema {schema} is newer than this code's {current}")
        while schema < current:
            upcast = self._upcasters.get((type_name, schema))
            if upcast is None:
                raise SchemaError(f"no upcaster for {type_name} from schema {schema}")
            data, schema = upcast(dict(data)), schema + 1
        return data

    # commands --------------------------------------------------------------------------------------
    def command_data(self, command: Command) -> tuple[str, dict]:
        cls = type(command)
        if self.commands.get(cls.__name__) is not cls:
            raise SchemaError(f"command class {cls.__name__} is not registered")
        return cls.__name__, {name: getattr(command, name) for name in _field_names(cls)}

    def command_class(self, type_name: str) -> type[Command]:
        cls = self.commands.get(type_name)
        if cls is None:
            known = ", ".join(sorted(self.commands)) or "none"
            raise SchemaError(f"unknown command {type_name!r} (commands: {known})")
        return cls

    def command_from(self, type_name: str, data: dict, sealer: Sealer | None = None) -> Command:
        """The command of ``type_name`` with fields ``data``; sealed personal fields are opened with ``sealer``
        (or read FORGOTTEN). A field the class does not take, or one it needs and is not given, is refused
        naming the fields the command takes."""
        cls = self.commands.get(type_name) or self.command_class(type_name)
        names, required = _shape(cls)
        if type(data) is not dict or (data.keys() != names and not names >= data.keys() >= required):
            _checked_fields(cls, data)  # says what is wrong
        try:
            return cls(**_opened(cls, data, sealer))
        except TypeError as exc:
            raise SchemaError(f"{type_name}: {exc}") from None

    def seal_command(self, type_name: str, data: dict, sealer: Sealer | None) -> dict:
        """``data`` checked, with the command's personal fields sealed with its subject's key (as stored)."""
        cls = self.command_class(type_name)
        return _sealed(cls, _checked_fields(cls, data), sealer)

    def seal_checked(self, type_name: str, data: dict, sealer: Sealer | None) -> dict:
        """``seal_command`` of fields checked already (by ``command_from``, or a registered command's
        ``command_data``): not checked again."""
        return _sealed(self.command_class(type_name), data, sealer)

    def open_command(self, type_name: str, data: dict, sealer: Sealer | None) -> dict:
        """Stored command fields with the personal ones opened (or FORGOTTEN); an unknown type as stored."""
        cls = self.commands.get(type_name)
        return dict(data) if cls is None else _opened(cls, data, sealer)

    # events appended directly (CommandClient.append): through the commands topic, sealed the same way
    def seal_appended(self, event: Event, sealer: Sealer | None) -> dict:
        cls = type(event)
        if self.events.get(cls.__name__) is not cls:
            raise SchemaError(f"event class {cls.__name__} is not registered")
        return {"type": cls.__name__, "data": _sealed(cls, {n: getattr(event, n) for n in _field_names(cls)}, sealer)}

    def open_appended(self, stored: dict, sealer: Sealer | None) -> Event:
        cls = self.events.get(stored.get("type"))
        if cls is None:
            raise SchemaError(f"unknown event type {stored.get('type')!r}")
        try:
            return cls(**_opened(cls, stored.get("data") or {}, sealer))
        except TypeError as exc:
            raise SchemaError(f"{cls.__name__}: {exc}") from None


def _check_subject(cls: type) -> tuple[str, ...]:
    """A class's personal fields, refused unless ``subject`` names one of its fields."""
    personal_fields = _personal_fields(cls)
    if personal_fields and (cls.subject is None or cls.subject not in _field_names(cls)):
        raise TypeError(f"{cls.__name__}: personal fields {personal_fields} need `subject` naming a field")
    return personal_fields


@functools.cache
def _shape(cls: type) -> tuple[frozenset[str], frozenset[str]]:
    """(every field name, the names of the fields with no default) of a dataclass."""
    fields = dataclasses.fields(cls)
    return (frozenset(f.name for f in fields),
            frozenset(f.name for f in fields if f.default is dataclasses.MISSING
                      and f.default_factory is dataclasses.MISSING))


def _checked_fields(cls: type, data: dict) -> dict:
    """``data``, refused (naming the fields ``cls`` takes) unless it gives every field without a default and
    nothing else."""
    if not isinstance(data, dict):
        raise SchemaError(f"{cls.__name__}: fields must be a JSON object, not {type(data).__name__}")
    names, required = _shape(cls)
    if data.keys() <= names and data.keys() >= required:
        return data
    takes = ", ".join(_field_names(cls))
    unknown = [name for name in data if name not in names]
    if unknown:
        raise SchemaError(f"{cls.__name__} has no field {', '.join(map(repr, unknown))} (it takes: {takes})")
    missing = [name for name in _field_names(cls) if name in required and name not in data]
    raise SchemaError(f"{cls.__name__} needs field {', '.join(map(repr, missing))} (it takes: {takes})")


def _sealed(cls: type, data: dict, sealer: Sealer | None) -> dict:
    """``data`` with ``cls``'s personal fields sealed with the key of the subject ``data`` names."""
    personal_fields = _personal_fields(cls)
    if not personal_fields:
        return data
    if sealer is None:
        raise SchemaError(f"{cls.__name__} has personal fields and no key store was given")
    data, subject = dict(data), str(data[cls.subject])
    for name in personal_fields:
        if name in data:
            data[name] = sealer.seal(subject, orjson.dumps(data[name]))
    return data


def _opened(cls: type, data: dict, sealer: Sealer | None) -> dict:
    """``data`` with ``cls``'s sealed personal fields opened, or FORGOTTEN where the key is gone."""
    personal_fields = _personal_fields(cls)
    for name in personal_fields:
        if type(data.get(name)) is dict:
            break
    else:  # nothing sealed (no personal fields, or given in plain text): as it is
        return data
    data = dict(data)
    for name in personal_fields:
        sealed = data.get(name)
        if isinstance(sealed, dict) and "sealed" in sealed:
            plaintext = sealer.open(sealed) if sealer is not None else None
            data[name] = FORGOTTEN if plaintext is None else orjson.loads(plaintext)
    return data


def b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode()

