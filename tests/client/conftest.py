"""A stand-in for a shard that hangs up: for the client's specs of lost connections."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

DOCUMENT = {"urn": "urn:themis:books:x", "version": 3, "document": {"t": 1}}


def _serve_reads(listener: socket.socket, answers: list[bool], accepted: list[int]) -> None:
    """One connection per entry of ``answers``: read the request, then answer it with
    ``DOCUMENT`` (True) or hang up without a word (False, as a shard shutting down does)."""
    body = json.dumps(DOCUMENT).encode()
    head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
    for answer in answers:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        accepted.append(1)
        with conn:
            conn.recv(65536)
            if answer:
                conn.sendall(head.encode() + b"connection: close\r\n\r\n" + body)


@pytest.fixture
def reads_served() -> Iterator[Callable[[list[bool]], tuple[str, list[int]]]]:
    """``reads_served([False, True])``: a URL whose first connection is hung up and whose second
    is answered, and the list its connections are counted in."""
    started: list[tuple[socket.socket, threading.Thread]] = []

    def serve(answers: list[bool]) -> tuple[str, list[int]]:
        accepted: list[int] = []
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(5)
        thread = threading.Thread(target=_serve_reads, args=(listener, answers, accepted), daemon=True)
        thread.start()
        started.append((listener, thread))
        return f"http://127.0.0.1:{listener.getsockname()[1]}", accepted

    yield serve
    for listener, thread in started:
        listener.close()
        thread.join(5)
