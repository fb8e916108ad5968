"""A SASL cluster for the dashboard's tests: users made before the broker starts, the dashboard's own user with
DESCRIBE only (it may look, not change), and the FRESHET_* variables that make the dashboard use that user."""

from click.testing import CliRunner
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType)


def add_users(data, *users: str) -> None:
    """Each user with the password ``<user>-pw``, written to the broker's data directory before it starts by
    ``freshet users add`` (run in this process: a Python start a user saved)."""
    from freshet.cli.main import cli

    for user in users:
        result = CliRunner().invoke(cli, ["users", "add", user, "--password", f"{user}-pw", "--data-dir", str(data)])
        assert result.exit_code == 0, result.output


def sasl(bootstrap: str, user: str) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": f"{user}-pw"}


def look_only(admin: AdminClient, user: str, monkeypatch) -> None:
    """``user`` may DESCRIBE every topic and group, nothing more; the dashboard started after this runs as it."""
    for rtype in (ResourceType.TOPIC, ResourceType.GROUP):
        for f in admin.create_acls([AclBinding(rtype, "*", ResourcePatternType.LITERAL, f"User:{user}", "*",
                                               AclOperation.DESCRIBE, AclPermissionType.ALLOW)]).values():
            f.result(10)
    for variable, value in {"FRESHET_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "FRESHET_SASL_MECHANISM": "PLAIN",
                            "FRESHET_SASL_USERNAME": user, "FRESHET_SASL_PASSWORD": f"{user}-pw"}.items():
        monkeypatch.setenv(variable, value)
