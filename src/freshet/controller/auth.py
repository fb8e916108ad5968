"""The controllers' cluster secret: where it is read from, and the challenge-response that proves it on the JSON
endpoint.

The same secret serves two ends. Between controllers it is pysyncobj's ``password`` (``node.Controller``): every
Raft message encrypted and authenticated. On the JSON endpoint (``--endpoint-auth``) a connection proves it
before its first request, both ways, without sending it::

    client -> {"op": "hello", "nonce": CN}
    server -> {"error": "NONE", "auth": true, "nonce": SN, "proof": HMAC(secret, "controller " + CN)}
    client -> {"op": "auth", "proof": HMAC(secret, "client " + SN)}
    server -> {"error": "NONE"}     (or CLUSTER_AUTHORIZATION_FAILED, and the connection closes)

(HMAC-SHA256, hex; nonces of 16 random bytes, hex). A server without endpoint authentication answers the hello
``{"error": "NONE", "auth": false}``. The exchange authenticates the two ends, not what follows: the endpoint
stays plaintext, for a network the brokers and controllers share.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat

PASSWORD_FILE_ENV = "FRESHET_CONTROLLER_PASSWORD_FILE"  # where the secret is read from when not given
MIN_PASSWORD_LENGTH = 16
NONCE_HEX_CHARS = 32


def read_password_file(path: str) -> str:
    """The cluster secret kept in ``path`` (its first line, without the line end). A ValueError of one line when
    the file cannot be read, holds less than 16 characters, or other users may read or change it (group or
    world permissions: refused as ssh refuses such a key and PostgreSQL such a server key)."""
    try:
        with open(path, encoding="utf-8") as f:
            secret = f.readline().rstrip("\r\n")
            mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the controller password file {path}: {exc.strerror or exc}") from None
    if len(secret) < MIN_PASSWORD_LENGTH:
        raise ValueError(f"the controller password in {path} has {len(secret)} characters; give at least "
                         f"{MIN_PASSWORD_LENGTH} (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    if mode & 0o077:
        raise ValueError(f"the controller password file {path} has mode {mode:04o}: other users may read it; "
                         f"chmod 600 {path}")
    return secret


def secret_from_env() -> str | None:
    """The secret in the file $FRESHET_CONTROLLER_PASSWORD_FILE names, or None when it names none."""
    path = os.environ.get(PASSWORD_FILE_ENV)
    return read_password_file(path) if path else None


def new_nonce() -> str:
    return secrets.token_hex(NONCE_HEX_CHARS // 2)


def proof(secret: str, role: str, nonce: str) -> str:
    """What ``role`` ("controller" or "client") answers to the other end's ``nonce``."""
    return hmac.new(secret.encode(), f"{role} {nonce}".encode(), hashlib.sha256).hexdigest()


def proves(secret: str, role: str, nonce: str, given) -> bool:
    return isinstance(given, str) and hmac.compare_digest(proof(secret, role, nonce), given)


def hello() -> tuple[dict, str]:
    """The client's first request, and its nonce."""
    nonce = new_nonce()
    return {"op": "hello", "nonce": nonce}, nonce


def answer_hello(secret: str, address, nonce: str, answer: dict) -> dict | None:
    """The client's check of the server's answer to its hello: None when the server asks for no authentication,
    else the auth request to send. PermissionError when the server does not prove the secret."""
    if answer.get("error") != "NONE":
        raise PermissionError(f"controller at {address} refused the hello: {answer.get('message') or answer}")
    if not answer.get("auth"):
        return None
    if not proves(secret, "controller", nonce, answer.get("proof")) or not isinstance(answer.get("nonce"), str):
        raise PermissionError(f"controller at {address} does not know the cluster secret")
    return {"op": "auth", "proof": proof(secret, "client", answer["nonce"])}


def check_auth_answer(address, answer: dict) -> None:
    if answer.get("error") != "NONE":
        raise PermissionError(f"controller at {address} refused the cluster secret: {answer.get('message')}")
