"""``freshet users``, ``freshet acl``, ``freshet security init``: who may connect, what they may do, and
certificates for TLS on this machine."""

from __future__ import annotations

import datetime
import ipaddress
import os
import sys

import click

from freshet.client.errors import ClientError
from freshet.client.security import (
    MECHANISMS,
    OPERATIONS,
    Acl,
    add_acls,
    add_user,
    delete_user,
    list_acls,
    list_users,
    remove_acls,
)

from .common import bootstrap_option, one_line_errors

CLUSTER_NAME = "kafka-cluster"


def _password(password: str | None, from_stdin: bool) -> str:
    if from_stdin:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise ClientError("give the password with --password-stdin (or --password)")
    return password


@click.group()
def users() -> None:
    """SASL/SCRAM users: credentials kept salted and hashed by the broker (AlterUserScramCredentials)."""


@users.command("add")
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin.")
@click.option("--password", default=None, help="The password (visible to other local users: prefer stdin).")
@click.option("--mechanism", "mechanisms", multiple=True, type=click.Choice(sorted(MECHANISMS)),
              help="Default: both SCRAM-SHA-256 and SCRAM-SHA-512.")
@click.option("--iterations", default=4096, show_default=True, type=int)
@click.option("--data-dir", default=None, help="Write straight into a stopped broker's data directory (the first "
                                               "user of a secured broker).")
@bootstrap_option
@one_line_errors
def users_add(name: str, password_stdin: bool, password: str | None, mechanisms: tuple[str, ...], iterations: int,
              data_dir: str | None, bootstrap: str) -> None:
    """Create NAME, or set its password."""
    secret = _password(password, password_stdin)
    chosen = list(mechanisms) or sorted(MECHANISMS)
    if data_dir is not None:
        from freshet.broker.security.credentials import (
            MAX_ITERATIONS,
            MIN_ITERATIONS,
            CredentialStore,
            ScramCredential,
        )

        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ClientError(f"--iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
        store = CredentialStore(os.path.join(data_dir, "security", "scram-credentials.json"))
        store.apply([(name, ScramCredential.from_password(m, secret, iterations)) for m in chosen], [])
    else:
        add_user(bootstrap, name, secret, chosen, iterations)
    click.echo(f"user {name}: {', '.join(chosen)}")


@users.command("list")
@click.option("--data-dir", default=None, help="Read a stopped broker's data directory instead.")
@bootstrap_option
@one_line_errors
def users_list(data_dir: str | None, bootstrap: str) -> None:
    """Every user with its mechanisms and iteration counts."""
    if data_dir is not None:
        from freshet.broker.security.credentials import CredentialStore

        store = CredentialStore(os.path.join(data_dir, "security", "scram-credentials.json"))
        found = {u: sorted((c.mechanism, c.iterations) for c in store.any_for(u)) for u in store.users}
    else:
        found = list_users(bootstrap)
    for user in sorted(found):
        click.echo(f"{user}\t{', '.join(f'{m} ({i} iterations)' for m, i in found[user])}")


@users.command("delete")
@click.argument("name")
@bootstrap_option
@one_line_errors
def users_delete(name: str, bootstrap: str) -> None:
    """Delete NAME's credentials (its open connections keep working until they re-authenticate)."""
    removed = delete_user(bootstrap, name)
    click.echo(f"deleted user {name} ({', '.join(removed)})")


# -- ACLs -----------------------------------------------------------------------------------------

def _resource(topic: str | None, group: str | None, cluster: bool, transactional_id: str | None,
              required: bool) -> tuple[str | None, str | None]:
    given = [(k, v) for k, v in (("topic", topic), ("group", group), ("transactional-id", transactional_id)) if v]
    if cluster:
        given.append(("cluster", CLUSTER_NAME))
    if len(given) > 1:
        raise ClientError("name one resource: --topic, --group, --transactional-id or --cluster")
    if not given:
        if required:
            raise ClientError("name a resource: --topic T, --group G, --transactional-id X or --cluster ('*' for all)")
        return None, None
    return given[0]


def _resource_options(fn):
    for option in reversed([
        click.option("--topic", default=None, help="A topic ('*': all topics)."),
        click.option("--group", default=None, help="A consumer or share group."),
        click.option("--transactional-id", default=None),
        click.option("--cluster", is_flag=True, help="The cluster (create topics, describe, alter ACLs...)."),
        click.option("--prefixed", is_flag=True, help="The name is a prefix: every resource whose name starts so."),
    ]):
        fn = option(fn)
    return fn


@click.group()
def acl() -> None:
    """Access control lists: which principal may do what to which topic, group or transactional id."""


@acl.command("add")
@click.option("--principal", required=True, help="User:alice (User:* for everyone).")
@click.option("--operation", "operations", multiple=True, required=True, type=click.Choice(OPERATIONS, case_sensitive=False))
@click.option("--deny", is_flag=True, help="A DENY binding (deny wins over allow).")
@click.option("--host", default="*", show_default=True, help="The client address it applies to.")
@_resource_options
@bootstrap_option
@one_line_errors
def acl_add(principal: str, operations: tuple[str, ...], deny: bool, host: str, topic: str | None, group: str | None,
            transactional_id: str | None, cluster: bool, prefixed: bool, bootstrap: str) -> None:
    """Allow (or with --deny, deny) PRINCIPAL the operations on one resource."""
    kind, name = _resource(topic, group, cluster, transactional_id, required=True)
    acls = [Acl("DENY" if deny else "ALLOW", principal, host, op.upper(), kind, name, prefixed) for op in operations]
    add_acls(bootstrap, acls)
    for a in acls:
        click.echo(a.line())


@acl.command("list")
@click.option("--principal", default=None)
@_resource_options
@bootstrap_option
@one_line_errors
def acl_list(principal: str | None, topic: str | None, group: str | None, transactional_id: str | None, cluster: bool,
             prefixed: bool, bootstrap: str) -> None:
    """Every ACL (or those of one principal or resource): permission, principal, host, operation, resource."""
    kind, name = _resource(topic, group, cluster, transactional_id, required=False)
    for a in list_acls(bootstrap, kind, name, principal):
        click.echo(a.line())


@acl.command("remove")
@click.option("--principal", default=None)
@click.option("--operation", default=None, type=click.Choice(OPERATIONS, case_sensitive=False))
@click.option("--deny", "permission", flag_value="DENY", default=None, help="Only DENY bindings.")
@click.option("--allow", "permission", flag_value="ALLOW", help="Only ALLOW bindings.")
@_resource_options
@bootstrap_option
@one_line_errors
def acl_remove(principal: str | None, operation: str | None, permission: str | None, topic: str | None,
               group: str | None, transactional_id: str | None, cluster: bool, prefixed: bool, bootstrap: str) -> None:
    """Remove the ACLs of one resource that match the options given (all of the resource's, if none)."""
    kind, name = _resource(topic, group, cluster, transactional_id, required=True)
    removed = remove_acls(bootstrap, kind, name, principal, operation.upper() if operation else None, permission,
                          prefixed)
    for a in removed:
        click.echo(a.line())
    click.echo(f"{len(removed)} ACLs removed", err=True)


# -- certificates ----------------------------------------------------------------------------------

@click.group()
def security() -> None:
    """TLS material for local use."""


@security.command("init")
@click.option("--dir", "directory", default="./security", show_default=True)
@click.option("--host", "hosts", multiple=True, default=("127.0.0.1", "localhost"), show_default=True,
              help="Names and addresses the broker's certificate is valid for.")
@click.option("--client", "clients", multiple=True, help="Also a client certificate with this CN (mutual TLS).")
@click.option("--days", default=365, show_default=True)
@one_line_errors
def security_init(directory: str, hosts: tuple[str, ...], clients: tuple[str, ...], days: int) -> None:
    """A CA (ca.pem) and a broker certificate signed by it (broker.pem, broker-key.pem); clients trust ca.pem."""
    os.makedirs(directory, exist_ok=True)
    ca_key, ca_cert = _issue("Freshet local CA", None, None, days, ca=True)
    _write(directory, "ca", ca_key, ca_cert)
    key, cert = _issue("freshet-broker", ca_key, ca_cert, days, hosts=hosts)
    _write(directory, "broker", key, cert)
    for name in clients:
        key, cert = _issue(name, ca_key, ca_cert, days, client=True)
        _write(directory, f"client-{name}", key, cert)
    click.echo(f"CA {os.path.join(directory, 'ca.pem')}; broker certificate for {', '.join(hosts)}: "
               f"--ssl-certfile {os.path.join(directory, 'broker.pem')} "
               f"--ssl-keyfile {os.path.join(directory, 'broker-key.pem')}")


def _issue(common_name: str, issuer_key, issuer_cert, days: int, ca: bool = False, hosts=(), client: bool = False,
           start_days_ago: int = 0):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=start_days_ago)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer_cert.subject if issuer_cert else subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if hosts:
        names = []
        for h in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                names.append(x509.DNSName(h))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    if client:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    if ca:
        builder = builder.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                      content_commitment=False, key_encipherment=False,
                                                      data_encipherment=False, key_agreement=False,
                                                      encipher_only=False, decipher_only=False), critical=True)
    cert = builder.sign(issuer_key or key, hashes.SHA256())
    return key, cert


def _write(directory: str, name: str, key, cert) -> None:
    from cryptography.hazmat.primitives import serialization

    key_path = os.path.join(directory, f"{name}-key.pem")
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    with open(os.path.join(directory, f"{name}.pem"), "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
