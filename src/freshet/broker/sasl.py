"""SASL on a connection: PLAIN and SCRAM-SHA-256/512 (the SCRAM exchange by ``scramp``), Kafka's framing
(SaslHandshake picks the mechanism, SaslAuthenticate carries each token), re-authentication (KIP-368) and a
limit on failed attempts per client address.

``SaslSession`` is one connection's state: which mechanism was chosen, the SCRAM exchange under way, and once
authenticated the principal (``User:name``) and when the session expires. ``FailedLogins`` is the broker's
memory of recent failures per host: past ``max_failures`` within ``window_s`` a host's attempts are refused
before any password is checked, so guessing passwords costs the guesser the window.
"""

from __future__ import annotations

import time
from collections import deque

from scramp import ScramException, ScramMechanism

from .credentials import MECHANISMS, CredentialStore

PLAIN = "PLAIN"
SUPPORTED = (PLAIN, *MECHANISMS.values())


class AuthenticationFailed(Exception):
    pass


class FailedLogins:
    def __init__(self, max_failures: int = 30, window_s: float = 60.0) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self._failures: dict[str, deque] = {}

    def _recent(self, host: str, now: float) -> deque:
        failures = self._failures.setdefault(host, deque())
        while failures and now - failures[0] > self.window_s:
            failures.popleft()
        return failures

    def blocked(self, host: str) -> bool:
        return self.max_failures > 0 and len(self._recent(host, time.monotonic())) >= self.max_failures

    def failed(self, host: str) -> bool:
        """Count a failure; True when it is the one that blocks the host."""
        recent = self._recent(host, time.monotonic())
        recent.append(time.monotonic())
        if len(self._failures) > 10_000:  # many hosts: forget the quiet ones
            for h in [h for h, q in self._failures.items() if not q]:
                del self._failures[h]
        return len(recent) == self.max_failures


class SaslSession:
    def __init__(self, credentials: CredentialStore, mechanisms: tuple[str, ...]) -> None:
        self.credentials = credentials
        self.enabled = mechanisms
        self.mechanism: str | None = None
        self.principal: str | None = None  # "User:name" once authenticated
        self.expires_at: float | None = None  # monotonic; None: never (re-authentication off)
        self._scram = None
        self._user: str | None = None

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def expired(self) -> bool:
        return self.expires_at is not None and time.monotonic() >= self.expires_at

    def handshake(self, mechanism: str) -> bool:
        """SaslHandshake: the mechanism for the next SaslAuthenticate exchange (also to re-authenticate)."""
        if mechanism not in self.enabled:
            return False
        self.mechanism = mechanism
        self._scram = None
        return True

    def authenticate(self, token: bytes) -> tuple[bytes, bool]:
        """One SaslAuthenticate token: (the answer's token, whether the exchange is complete). Raises
        AuthenticationFailed with the message Kafka gives."""
        if self.mechanism is None:
            raise AuthenticationFailed("no SaslHandshake before SaslAuthenticate")
        if self.mechanism == PLAIN:
            return self._plain(token), True
        return self._scram_step(token)

    def _plain(self, token: bytes) -> bytes:
        try:
            authzid, user, password = token.decode("utf-8").split("\0")
        except ValueError:
            raise AuthenticationFailed("malformed PLAIN token") from None
        if authzid and authzid != user:
            raise AuthenticationFailed("authorization id must be empty or the user name")
        credentials = self.credentials.any_for(user)
        if not credentials or not credentials[0].matches(password):
            raise AuthenticationFailed(self._invalid())
        self._done(user)
        return b""

    def _scram_step(self, token: bytes) -> tuple[bytes, bool]:
        try:
            if self._scram is None:
                self._scram = ScramMechanism(self.mechanism).make_server(self._auth_info)
                self._scram.set_client_first(token.decode("utf-8"))
                return self._scram.get_server_first().encode(), False
            self._scram.set_client_final(token.decode("utf-8"))
            answer = self._scram.get_server_final().encode()
        except (ScramException, UnicodeDecodeError, ValueError, KeyError) as exc:
            self._scram = None
            raise AuthenticationFailed(self._invalid()) from exc
        user = self._user
        self._scram = None
        assert user is not None
        self._done(user)
        return answer, True

    def _auth_info(self, user: str):
        credential = self.credentials.get(user, self.mechanism or "")
        if credential is None:
            raise KeyError(user)  # unknown users fail exactly as wrong passwords do
        self._user = user
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def _invalid(self) -> str:
        return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {self.mechanism}"

    def _done(self, user: str) -> None:
        principal = f"User:{user}"
        if self.principal is not None and principal != self.principal:  # KIP-368: the same principal or nothing
            raise AuthenticationFailed(f"re-authentication as {principal} on a connection of {self.principal}")
        self.principal = principal
