"""A throwaway PostgreSQL server on 127.0.0.1 for the demo, benchmarks and tests (Debian's packages).

initdb runs into a directory of ours as the ``postgres`` system user when we are root (the
server refuses to run as root), with logical replication on (for CDC) and trust auth on
loopback only.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time

from .broker import free_port


def _bin_dir() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL is not installed: run scripts/install-test-deps.sh (apt-get install postgresql)")
    return os.path.dirname(found[-1])


class PostgresServer:
    def __init__(self, data_dir: str | None = None, port: int | None = None, user: str = "freshet",
                 database: str = "freshet") -> None:
        self._tmp = None
        if data_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="freshet-pg-")
            data_dir = os.path.join(self._tmp, "data")
        self.data_dir = os.path.abspath(data_dir)
        self.port = port or free_port()
        self.user = user
        self.database = database
        self.bin = _bin_dir()
        self.as_root = os.geteuid() == 0

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname={self.database}"

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [os.path.join(self.bin, args[0]), *args[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120)

    def start(self) -> "PostgresServer":
        parent = os.path.dirname(self.data_dir)
        os.makedirs(parent, exist_ok=True)
        if self.as_root:
            shutil.chown(parent, "postgres")
            os.chmod(parent, 0o755)
        if not os.path.exists(os.path.join(self.data_dir, "PG_VERSION")):
            self._run("initdb", "-D", self.data_dir, "-U", self.user, "-A", "trust", "-E", "UTF8", "--no-locale")
            with open(os.path.join(self.data_dir, "postgresql.conf"), "a") as conf:
                conf.write(
                    f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = '{self.data_dir}'\n"
                    "wal_level = logical\nmax_replication_slots = 10\nmax_wal_senders = 10\n"
                    "shared_buffers = 128MB\nsynchronous_commit = on\n"
                )
        self._run("pg_ctl", "-D", self.data_dir, "-l", os.path.join(self.data_dir, "server.log"), "-w",
                  "-o", f"-p {self.port}", "start")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            probe = self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d", "postgres",
                              "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'", check=False)
            if probe.returncode == 0:
                if probe.stdout.strip() != "1":
                    self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, self.database)
                return self
            time.sleep(0.2)
        raise RuntimeError(f"PostgreSQL did not start; see {self.data_dir}/server.log")

    def stop(self) -> None:
        if os.path.exists(os.path.join(self.data_dir, "postmaster.pid")):
            self._run("pg_ctl", "-D", self.data_dir, "-m", "fast", "-w", "stop", check=False)

    def close(self) -> None:
        self.stop()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "PostgresServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
