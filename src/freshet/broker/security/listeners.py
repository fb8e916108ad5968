"""Listeners: where the broker accepts connections and how each is secured, with Kafka's names.

``PLAINTEXT://127.0.0.1:9092``, ``SSL://...``, ``SASL_PLAINTEXT://...``, ``SASL_SSL://0.0.0.0:9093``: the
scheme is the listener's name and its security protocol. A client is told (Metadata, FindCoordinator) the
address of the listener it came in on, so each listener advertises itself.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class ListenerError(ValueError):
    pass


@dataclass(frozen=True)
class Listener:
    protocol: str
    host: str
    port: int

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def __str__(self) -> str:
        return f"{self.protocol}://{self.host}:{self.port}"


def parse_listener(spec: str) -> Listener:
    protocol, sep, address = spec.partition("://")
    if not sep or protocol.upper() not in PROTOCOLS:
        raise ListenerError(f"a listener looks like SASL_SSL://127.0.0.1:9093 (one of {', '.join(PROTOCOLS)}), "
                            f"not {spec!r}")
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ListenerError(f"listener {spec!r} needs host:port")
    return Listener(protocol.upper(), host.strip("[]") or "0.0.0.0", int(port))


@dataclass
class SecurityConfig:
    ssl_certfile: str | None = None  # the broker's certificate chain (PEM) for SSL / SASL_SSL listeners
    ssl_keyfile: str | None = None
    ssl_cafile: str | None = None  # CAs whose client certificates are trusted (mutual TLS)
    ssl_client_auth: str = "none"  # none, requested, required (ssl.client.auth)
    sasl_mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
    # authorizer.class.name: whether requests are authorized against ACLs (and the ACL APIs work); None: when
    # some listener authenticates its clients (SASL, or TLS with required client certificates)
    authorizer: bool | None = None
    super_users: tuple[str, ...] = ()  # principals allowed everything (super.users)
    allow_everyone_if_no_acl_found: bool = False  # allow.everyone.if.no.acl.found: a resource no ACL names is open
    reauth_ms: int = 0  # connections.max.reauth.ms (0: sessions do not expire)
    max_failed_authentications: int = 30  # per client address within a minute; then attempts are refused
    # a cluster's broker-to-broker connections (replica fetches, WriteTxnMarkers) on a SASL listener:
    # sasl.mechanism.inter.broker.protocol and the user and password of the broker's JAAS login
    inter_broker_sasl_mechanism: str | None = None
    inter_broker_user: str | None = None
    inter_broker_password: str | None = None

    def inter_broker_login(self) -> tuple[str, str, str] | None:
        """(mechanism, user, password) a broker authenticates with to the others, or None (no SASL)."""
        if not (self.inter_broker_sasl_mechanism and self.inter_broker_user):
            return None
        return self.inter_broker_sasl_mechanism, self.inter_broker_user, self.inter_broker_password or ""

    def authorizes(self, listeners: list[Listener]) -> bool:
        """Whether the broker authorizes requests against ACLs: as asked (``--authorizer``), else once some
        listener authenticates its clients."""
        if self.authorizer is not None:
            return self.authorizer
        return (any(l.sasl for l in listeners)
                or (self.ssl_client_auth == "required" and any(l.tls for l in listeners)))

    def server_context(self) -> ssl.SSLContext:
        if not (self.ssl_certfile and self.ssl_keyfile):
            raise ListenerError("an SSL or SASL_SSL listener needs --ssl-certfile and --ssl-keyfile")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        if self.ssl_client_auth != "none":
            if not self.ssl_cafile:
                raise ListenerError("--ssl-client-auth needs --ssl-cafile (the CAs of client certificates)")
            context.load_verify_locations(self.ssl_cafile)
            context.verify_mode = ssl.CERT_REQUIRED if self.ssl_client_auth == "required" else ssl.CERT_OPTIONAL
        return context


def principal_of_certificate(cert: dict | None) -> str | None:
    """``User:CN=...,O=...`` from a verified client certificate's subject (most specific part first, as
    Kafka's default principal builder writes the X.500 name)."""
    if not cert or not cert.get("subject"):
        return None
    parts = [f"{_SHORT.get(k, k)}={v}" for rdn in reversed(cert["subject"]) for k, v in rdn]
    return "User:" + ",".join(parts)


_SHORT = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
          "stateOrProvinceName": "ST", "localityName": "L", "emailAddress": "EMAILADDRESS"}
