"""Spec: ``themis demo`` talks through ``themis_client``; a refusal ends it with one line naming
the request, as before (``PUT /v1/collections/demo → 401 invalid_api_key: ...``), never a traceback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from themis_core.access_policy import Role
from themis_core.api_keys import entry_for, new_key
from themis_shard.app import create_app
from themis_shard.auth.settings import AuthSettings
from themis_shard.demo.run import run_demo
from themis_shard.llm.settings import LLMSettings
from themis_shard.settings import Settings


@pytest.fixture
def keyed_shard(tmp_path: Path) -> Iterator[str]:
    """A real shard app on uvicorn with API keys on (one client key, which the tests never send)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    auth = AuthSettings(enabled=True, keys=entry_for(new_key(), Role.client).line())
    app = create_app(Settings(data_dir=tmp_path / "shard", llm=LLMSettings(enabled=False), auth=auth))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_a_refused_request_exits_with_the_request_and_the_servers_code(keyed_shard: str) -> None:
    with pytest.raises(SystemExit) as refused:
        run_demo(keyed_shard, api_key="themis_wrong")
    assert str(refused.value) == "PUT /v1/collections/demo → 401 invalid_api_key: the API key is not valid"


def test_an_unreachable_cluster_exits_with_one_line_too() -> None:
    with pytest.raises(SystemExit) as unreachable:
        run_demo("http://127.0.0.1:9", timeout_s=1)  # discard port: nothing listens
    assert str(unreachable.value).startswith("PUT /v1/collections/demo → 0 unreachable: ")
