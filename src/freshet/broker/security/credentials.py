"""SCRAM credentials (RFC 5802 / 7677), as Kafka keeps them: per user and mechanism a salt, an iteration count, a
stored key and a server key. No password, nor anything a password could be read back from, is kept.

The store is one JSON file in the broker's data directory (``security/scram-credentials.json``, mode 0600,
replaced atomically), not a topic: clients may read internal topics. AlterUserScramCredentials gives the
broker a salted password (the client did the expensive PBKDF2 part); the broker derives the two keys from it.
SASL/PLAIN logins are checked against the same credentials (the password is salted with the stored salt and
compared), so a user has one secret whichever mechanism the client picks.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from dataclasses import dataclass

from ..durability import write_json_atomically

MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_IDS = {name: number for number, name in MECHANISMS.items()}
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384  # Kafka's bounds


@dataclass(frozen=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_salted_password(cls, mechanism: str, salt: bytes, iterations: int, salted: bytes) -> "ScramCredential":
        digest = _HASHES[mechanism]
        client_key = hmac.new(salted, b"Client Key", digest).digest()
        stored_key = hashlib.new(digest, client_key).digest()
        server_key = hmac.new(salted, b"Server Key", digest).digest()
        return cls(mechanism, salt, iterations, stored_key, server_key)

    @classmethod
    def from_password(cls, mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                      salt: bytes | None = None) -> "ScramCredential":
        salt = salt if salt is not None else os.urandom(32)
        return cls.from_salted_password(mechanism, salt, iterations, salted_password(mechanism, password, salt,
                                                                                     iterations))

    def matches(self, password: str) -> bool:
        """A PLAIN login's password against this credential (constant-time comparison)."""
        other = ScramCredential.from_password(self.mechanism, password, self.iterations, self.salt)
        return hmac.compare_digest(other.stored_key, self.stored_key)

    def to_json(self) -> dict:
        return {"salt": _b64(self.salt), "iterations": self.iterations, "stored_key": _b64(self.stored_key),
                "server_key": _b64(self.server_key)}


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode(), salt, iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class CredentialStore:
    """user -> mechanism -> ScramCredential, persisted in one file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.users: dict[str, dict[str, ScramCredential]] = {}
        if os.path.exists(path):
            with open(path) as f:
                for user, mechanisms in json.load(f).items():
                    self.users[user] = {
                        mechanism: ScramCredential(mechanism, base64.b64decode(c["salt"]), int(c["iterations"]),
                                                   base64.b64decode(c["stored_key"]), base64.b64decode(c["server_key"]))
                        for mechanism, c in mechanisms.items()}

    def replace(self, users: dict[str, dict[str, ScramCredential]]) -> None:
        """Every credential at once, from elsewhere (a cluster's metadata): not written to this broker's file."""
        self.users = {user: dict(mechanisms) for user, mechanisms in users.items() if mechanisms}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def any_for(self, user: str) -> list[ScramCredential]:
        return list(self.users.get(user, {}).values())

    def apply(self, upserts: list[tuple[str, ScramCredential]], deletes: list[tuple[str, str]]) -> None:
        """Change the credentials and write the file (fsync'd, atomically replaced) before returning."""
        for user, mechanism in deletes:
            self.users.get(user, {}).pop(mechanism, None)
            if user in self.users and not self.users[user]:
                del self.users[user]
        for user, credential in upserts:
            self.users.setdefault(user, {})[credential.mechanism] = credential
        self._save()

    def _save(self) -> None:
        write_json_atomically(self.path, {u: {m: c.to_json() for m, c in ms.items()} for u, ms in self.users.items()},
                              private=True)
