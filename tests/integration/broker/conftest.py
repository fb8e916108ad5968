"""Fixtures of the broker's integration tests alone (the shared ones are in tests/conftest.py)."""

import shutil

import pytest


@pytest.fixture(scope="session")
def kcat():
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat is missing: `make test` installs it (scripts/install-test-deps.sh)")
    return path
