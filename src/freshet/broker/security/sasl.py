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
    """Recent failed logins per (client address, user name), and per address. Past ``max_failures`` within
    ``window_s`` for one user from one address — or ten times that for all users from one address (password
    spraying) — attempts from there are refused, right password or not, until the window has passed. A
    misconfigured client thus locks out its own user on its own host, not its neighbours."""

    def __init__(self, max_failures: int = 30, window_s: float = 60.0) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self._failures: dict[tuple[str, str | None], deque] = {}

    def _recent(self, key: tuple[str, str | None], now: float) -> deque:
        failures = self._failures.setdefault(key, deque())
        while failures and now - failures[0] > self.window_s:
            failures.popleft()
        return failures

    def blocked(self, host: str, user: str | None) -> bool:
        if self.max_failures <= 0:
            return False
        now = time.monotonic()
        return (len(self._recent((host, user), now)) >= self.max_failures
                or len(self._recent((host, None), now)) >= self.max_failures * 10)

    def failed(self, host: str, user: str | None) -> bool:
        """Count a failure; True when it is the one that blocks this user from this host."""
        now = time.monotonic()
        recent = self._recent((host, user), now)
        recent.append(now)
        self._recent((host, None), now).append(now)
        if len(self._failures) > 10_000:  # many hosts: forget the quiet ones
            for key in [k for k, q in self._failures.items() if not q]:
                del self._failures[key]
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
        self.attempted_user: str | None = None  # the name the current exchange claims, once it is known

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
        self.attempted_user = user
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
        self.attempted_user = user
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
