"""The dashboard's app served by uvicorn in a thread of the test's process (real connections, real disconnects,
and the app's module state visible to the test)."""

from __future__ import annotations

import socket
import threading
from contextlib import contextmanager

import uvicorn

from freshet.testing.polling import wait_for


@contextmanager
def served(app):
    """Yields the port; stops the server on exit."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True, name="test-dashboard")
    thread.start()
    try:
        wait_for(lambda: server.started, 60, "the dashboard to listen")
        yield port
    finally:
        server.should_exit = True
        thread.join(30)


def open_stream(port: int, path: str) -> tuple[socket.socket, bytes]:
    """A GET of ``path`` on a connection of its own; returns the socket and the first line of the body once it
    came (the response is chunked: the first chunk's line)."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=120)
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data or b"\n" not in data.split(b"\r\n\r\n", 1)[1].split(b"\r\n", 1)[-1]:
        chunk = conn.recv(65536)
        assert chunk, f"the connection closed early: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200"), head
    return conn, body.split(b"\r\n", 1)[1].split(b"\n", 1)[0]
