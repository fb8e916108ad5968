"""A client of the controllers' JSON endpoint, for tests, benchmarks and (until the brokers speak the Kafka
controller APIs) tools: one request a line, one answer a line. Given the cluster secret (``password``, by
default the file $FRESHET_CONTROLLER_PASSWORD_FILE names, if it names one), a connection proves it first to a
controller that asks for it (``auth``); a controller that asks but does not prove it is refused
(PermissionError)."""

from __future__ import annotations

import asyncio
import json
import socket

from . import auth


class ControllerClient:
    """``ControllerClient(("127.0.0.1", 9201)).command({"command": "CreateTopic", ...})``."""

    def __init__(self, address: tuple[str, int], timeout: float = 30.0, password: str | None = None) -> None:
        self.address = address
        self.timeout = timeout
        self.password = password if password is not None else auth.secret_from_env()
        self._sock: socket.socket | None = None
        self._file = None

    def request(self, request: dict) -> dict:
        if self._sock is None:
            self._sock = socket.create_connection(self.address, timeout=self.timeout)
            self._file = self._sock.makefile("rb")
            if self.password:
                try:
                    hello, nonce = auth.hello()
                    proof = auth.answer_hello(self.password, self.address, nonce, self._exchange(hello))
                    if proof is not None:
                        auth.check_auth_answer(self.address, self._exchange(proof))
                except (OSError, ValueError):
                    self.close()
                    raise
        return self._exchange(request)

    def _exchange(self, request: dict) -> dict:
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


class AsyncControllerClient:
    """The same endpoint from an asyncio program (the broker): one connection at a time to one of the
    controllers, moving on to the next one when a connection fails, one request in flight at a time.
    ``request`` raises ConnectionError once no controller answered (the caller retries later)."""

    def __init__(self, addresses: list[tuple[str, int]], timeout: float = 30.0, password: str | None = None) -> None:
        if not addresses:
            raise ValueError("no controller address given")
        self.addresses = list(addresses)
        self.timeout = timeout
        self.password = password if password is not None else auth.secret_from_env()
        self._next = 0
        self._reader = None
        self._writer = None
        self._lock = None  # an asyncio.Lock, made in the loop that uses it

    @property
    def connected_to(self) -> tuple[str, int] | None:
        return self.addresses[(self._next - 1) % len(self.addresses)] if self._writer is not None else None

    async def request(self, request: dict, timeout: float | None = None) -> dict:
        if self._lock is None:
            self._lock = asyncio.Lock()
        timeout = self.timeout if timeout is None else timeout
        last: Exception | None = None
        async with self._lock:
            for _ in range(len(self.addresses)):
                try:
                    if self._writer is None:
                        address = self.addresses[self._next % len(self.addresses)]
                        self._next += 1
                        self._reader, self._writer = await asyncio.wait_for(
                            asyncio.open_connection(*address, limit=1 << 26), min(timeout, 5.0))
                        if self.password:
                            hello, nonce = auth.hello()
                            answer = await self._exchange(hello, min(timeout, 15.0))
                            proof = auth.answer_hello(self.password, address, nonce, answer)
                            if proof is not None:
                                auth.check_auth_answer(address, await self._exchange(proof, min(timeout, 15.0)))
                    return await self._exchange(request, timeout)
                except (OSError, asyncio.TimeoutError, ValueError) as exc:
                    last = exc
                    self._drop()
        raise ConnectionError(f"no controller of {self.addresses} answered: {last!r}")

    async def _exchange(self, request: dict, timeout: float) -> dict:
        self._writer.write(json.dumps(request).encode() + b"\n")
        await self._writer.drain()
        line = await asyncio.wait_for(self._reader.readline(), timeout)
        if not line:
            raise ConnectionError("the controller closed the connection")
        return json.loads(line)

    async def command(self, command: dict, session: bool = False, timeout: float | None = None) -> dict:
        request = {"op": "command", "command": command}
        if session:
            request["session"] = True
        return await self.request(request, timeout)

    def _drop(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def close(self) -> None:
        writer = self._writer
        self._drop()
        if writer is not None:
            try:
                await writer.wait_closed()
            except OSError:
                pass
