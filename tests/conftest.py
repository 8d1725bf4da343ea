"""Shared fixtures: a real RocksDB store and a real shard app in temporary directories."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from themis_shard.app import create_app
from themis_shard.llm.settings import LLMSettings
from themis_shard.settings import Settings
from themis_shard.storage.documents import DocumentStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DocumentStore]:
    s = DocumentStore(tmp_path / "documents")
    yield s
    s.close()


def shard_settings(data_dir: Path, **overrides) -> Settings:
    """Settings for a documents-and-vectors shard (no model load)."""
    return Settings(data_dir=data_dir, llm=LLMSettings(enabled=False), **overrides)


@pytest.fixture
def make_settings():
    return shard_settings


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(shard_settings(tmp_path / "shard"))) as c:
        yield c


class _FileServer:
    """A real HTTP server for source downloads: ``files`` path → bytes; ``fail`` path → HTTP
    statuses answered first, one per request (transient failures); ``hits`` path → requests."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.files: dict[str, bytes] = {}
        self.fail: dict[str, list[int]] = {}
        self.hits: dict[str, int] = {}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.hits[self.path] = owner.hits.get(self.path, 0) + 1
                if owner.fail.get(self.path):
                    self.send_response(owner.fail[self.path].pop(0))
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                body = owner.files.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("content-length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def file_server() -> Iterator[_FileServer]:
    server = _FileServer()
    yield server
    server.close()
