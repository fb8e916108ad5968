"""A broker's own Kafka-protocol connection to another broker (a follower to its leader): requests built from
dicts with kio's schemas (as the broker builds its responses), framed with freshet.format, one at a time. On a
SASL listener it authenticates first (SaslHandshake, SaslAuthenticate: PLAIN or SCRAM by ``scramp``) with the
broker's inter-broker login, as Kafka's brokers do with sasl.mechanism.inter.broker.protocol."""

from __future__ import annotations

import asyncio
import io

from kio.serial import entity_reader, entity_writer

from freshet.format.errors import FrameError
from freshet.format.framing import SIZE, read_response_header, request_header, size_prefixed

from ..wire.protocol import build, request_schema, response_schema

MAX_RESPONSE_BYTES = 256 << 20
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, connect_timeout_s: float = 5.0,
                 sasl: tuple[str, str, str] | None = None) -> None:
        self.host, self.port = host, port
        self.client_id = client_id.encode()
        self.connect_timeout_s = connect_timeout_s
        self.sasl = sasl  # (mechanism, user, password): authenticate on connecting
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self) -> None:
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, limit=1 << 20), self.connect_timeout_s)
        if self.sasl is not None:
            try:
                await self._authenticate(*self.sasl)
            except BaseException:
                self.close()
                raise

    async def _authenticate(self, mechanism: str, user: str, password: str) -> None:
        """SaslHandshake v1 then SaslAuthenticate v2 tokens; ConnectionError with the broker's reason if refused."""
        answer = await self.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        if answer.error_code:
            raise ConnectionError(f"{self.host}:{self.port}: SASL mechanism {mechanism} refused "
                                  f"({answer.error_code.name}; the broker offers {list(answer.mechanisms)})")
        if mechanism == "PLAIN":
            await self._sasl_token(f"\0{user}\0{password}".encode())
            return
        from scramp import ScramClient, ScramException

        client = ScramClient([mechanism], user, password)
        server_first = await self._sasl_token(client.get_client_first().encode())
        try:
            client.set_server_first(server_first.decode())
            server_final = await self._sasl_token(client.get_client_final().encode())
            client.set_server_final(server_final.decode())
        except (ScramException, UnicodeDecodeError) as exc:
            raise ConnectionError(f"{self.host}:{self.port}: SCRAM exchange failed: {exc}") from None

    async def _sasl_token(self, token: bytes) -> bytes:
        answer = await self.request(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        if answer.error_code:
            raise ConnectionError(f"{self.host}:{self.port}: authentication failed: {answer.error_message}")
        return bytes(answer.auth_bytes)

    async def request(self, api_key: int, version: int, body: dict, timeout_s: float = 30.0):
        """Send a request built from ``body`` (see protocol.build); the decoded response entity. Raises
        ConnectionError when the connection fails or the answer does not come within ``timeout_s``."""
        if not self.connected:
            await self.connect()
        assert self._reader is not None and self._writer is not None
        schema = request_schema(api_key, version)
        self._correlation_id += 1
        buf = io.BytesIO()
        buf.write(request_header(api_key, version, self._correlation_id, self.client_id, schema.__flexible__))
        entity_writer(schema)(buf, build(schema, body))
        try:
            self._writer.write(size_prefixed(buf.getvalue()))
            frame = await asyncio.wait_for(self._read_frame(), timeout_s)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, OSError, FrameError) as exc:
            self.close()
            raise ConnectionError(f"{self.host}:{self.port}: {exc!r}") from None
        rschema = response_schema(api_key, version)
        correlation_id, pos = read_response_header(frame, api_key, rschema.__flexible__)
        if correlation_id != self._correlation_id:
            self.close()
            raise ConnectionError(f"{self.host}:{self.port}: answer to request {correlation_id}, "
                                  f"expected {self._correlation_id}")
        result = entity_reader(rschema)(frame, pos)
        return result[0] if isinstance(result, tuple) else result.value

    async def _read_frame(self) -> bytes:
        assert self._reader is not None
        (size,) = SIZE.unpack(await self._reader.readexactly(SIZE.size))
        if size < 0 or size > MAX_RESPONSE_BYTES:
            raise FrameError(f"response frame of {size} bytes")
        return await self._reader.readexactly(size)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
