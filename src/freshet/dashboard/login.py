"""Signing in to the dashboard with one's Kafka user: the name and password are checked by authenticating to the
cluster with them (SASL, through the dashboard's own security settings for everything but the credentials), so
the dashboard keeps no passwords of its own. A signed-in browser holds a random session id in an HttpOnly,
SameSite=Strict cookie; sessions last ``session_s``. Failed sign-ins are limited per client address.

The dashboard reads the cluster with its own credentials (FRESHET_* variables, ideally a user with read-only
ACLs) for what every page shows. What a signed-in user changes (topics, configs, records, offsets, users, ACLs,
quotas) and the security pages they read go to the cluster with that user's own credentials, so the cluster's
ACLs decide, as for any client of theirs: the password stays in the dashboard's memory for the session's life
(never on disk, never in the cookie) and is dropped at sign-out or expiry.
"""

from __future__ import annotations

import secrets
import time
from collections import deque

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from freshet.client.config import admin_config

COOKIE = "freshet_session"


class KafkaLogin:
    def __init__(self, bootstrap: str, mechanism: str | None = None, session_s: float = 8 * 3600,
                 max_failures: int = 10, window_s: float = 60.0) -> None:
        self.bootstrap = bootstrap
        self.mechanism = mechanism
        self.session_s = session_s
        self.max_failures = max_failures
        self.window_s = window_s
        self.sessions: dict[str, tuple[str, float]] = {}  # session id -> (user, expires at)
        self._secrets: dict[str, dict] = {}  # session id -> the user's SASL settings (acting as them)
        self._admins: dict[str, AdminClient] = {}
        self._failures: dict[str, deque] = {}

    def blocked(self, address: str) -> bool:
        recent = self._failures.setdefault(address, deque())
        now = time.monotonic()
        while recent and now - recent[0] > self.window_s:
            recent.popleft()
        return len(recent) >= self.max_failures

    def sign_in(self, address: str, user: str, password: str) -> str | None:
        """A new session id, or None (wrong credentials, or too many failures from ``address``)."""
        if self.blocked(address) or not user or not password:
            return None
        # one attempt, not librdkafka's reconnect loop: every retry with a wrong password counts against the user
        config = admin_config(self.bootstrap, {"log_level": 0, "sasl.username": user, "sasl.password": password,
                                               "reconnect.backoff.ms": 10_000, "reconnect.backoff.max.ms": 10_000})
        if not str(config.get("security.protocol", "")).upper().startswith("SASL"):
            raise RuntimeError("signing in needs the dashboard's own connection to use SASL (FRESHET_SECURITY_PROTOCOL)")
        if self.mechanism:
            config["sasl.mechanism"] = self.mechanism
        try:
            AdminClient(config).list_topics(timeout=3)
        except KafkaException:
            self._failures.setdefault(address, deque()).append(time.monotonic())
            return None
        session = secrets.token_urlsafe(24)
        self.sessions[session] = (user, time.monotonic() + self.session_s)
        self._secrets[session] = {k: config[k] for k in ("sasl.username", "sasl.password", "sasl.mechanism")
                                  if k in config}
        return session

    def credentials(self, session: str | None) -> dict | None:
        """The signed-in user's SASL settings (librdkafka's names), to act as them; None without a live session."""
        return self._secrets.get(session or "") if self.user_of(session) else None

    def admin_for(self, session: str | None) -> AdminClient | None:
        """An admin client acting as the session's user, kept for the session."""
        settings = self.credentials(session)
        if settings is None:
            return None
        if session not in self._admins:
            self._admins[session] = AdminClient(admin_config(self.bootstrap, {"log_level": 0, **settings}))
        return self._admins[session]

    def user_of(self, session: str | None) -> str | None:
        found = self.sessions.get(session or "")
        if found is None:
            return None
        user, expires = found
        if time.monotonic() > expires:
            self.sign_out(session)
            return None
        return user

    def sign_out(self, session: str | None) -> None:
        self.sessions.pop(session or "", None)
        self._secrets.pop(session or "", None)
        self._admins.pop(session or "", None)


LOGIN_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Freshet: sign in</title>
<style>body{font-family:system-ui,sans-serif;background:#f6f8fa;display:flex;justify-content:center;margin-top:12vh}
form{background:#fff;border:1px solid #d0d7de;padding:2em;border-radius:6px;min-width:18em}
input{display:block;width:100%;margin:.4em 0 1em;padding:.4em}button{padding:.5em 1.2em}.error{color:#b00}</style>
</head><body><form method="post" action="/login"><h2>Freshet</h2><p>Sign in with your Kafka user.</p>{error}
<label>User<input name="username" autocomplete="username" autofocus></label>
<label>Password<input name="password" type="password" autocomplete="current-password"></label>
<button type="submit">Sign in</button></form></body></html>"""
