"""A client of the controllers' JSON endpoint, for tests, benchmarks and (until the brokers speak the Kafka
controller APIs) tools: one request a line, one answer a line."""

from __future__ import annotations

import json
import socket


class ControllerClient:
    """``ControllerClient(("127.0.0.1", 9201)).command({"command": "CreateTopic", ...})``."""

    def __init__(self, address: tuple[str, int], timeout: float = 30.0) -> None:
        self.address = address
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._file = None

    def request(self, request: dict) -> dict:
        if self._sock is None:
            self._sock = socket.create_connection(self.address, timeout=self.timeout)
            self._file = self._sock.makefile("rb")
        try:
            self._sock.sendall(json.dumps(request).encode() + b"\n")
            line = self._file.readline()
        except OSError:
            self.close()
            raise
        if not line:
            self.close()
            raise ConnectionError(f"controller at {self.address} closed the connection")
        return json.loads(line)

    def command(self, command: dict) -> dict:
        return self.request({"op": "command", "command": command})

    def metadata(self) -> dict:
        return self.request({"op": "metadata"})

    def status(self) -> dict:
        return self.request({"op": "status"})

    def close(self) -> None:
        if self._sock is not None:
            self._file.close()
            self._sock.close()
            self._sock = self._file = None

    def __enter__(self) -> "ControllerClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
