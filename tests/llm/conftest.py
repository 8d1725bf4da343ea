"""Fixtures for the engine specs: the bundled model loaded once per session, engines and a
real uvicorn server per module (loading is cheap; contexts are what cost memory)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from themis_shard.llm.settings import LLMSettings
from themis_testing.app_server import Server

NOISE_LOGITS = 0.75
"""Largest change of a top-2 logit margin seen when only the batch shape changes (measured in
``test_engine_llm.py::test_batch_shape_noise_is_bounded``: 0.69 logits on this model; greedy
flips were only observed at margins ≤ 0.13). A greedy divergence at a position whose reference
margin exceeds this is a bug, not noise."""


@pytest.fixture(scope="session")
def model_path() -> Path:
    pytest.importorskip("llama_cpp")
    from themis_shard.llm.model import resolve_model_path

    return resolve_model_path("bundled")


@pytest.fixture(scope="session")
def native_model(model_path: Path):
    from themis_shard.llm.native import NativeModel

    m = NativeModel(model_path)
    yield m
    m.close()


def llm_settings(**overrides) -> LLMSettings:
    """Small, fast settings for tests (2 cores): a modest cache, no embedding model."""
    base = {
        "enabled": True,
        "n_ctx": 1024,
        "max_concurrent_requests": 16,
        "embedding_model": "none",
        "adapter_eval_on_load": False,
    }
    return LLMSettings(**{**base, **overrides})


@pytest.fixture(scope="module")
def make_server(tmp_path_factory):
    """Start a shard with the given LLM settings; stopped at the end of the module."""
    from themis_shard.app import create_app
    from themis_shard.settings import Settings

    started: list[Server] = []

    def make(**llm) -> Server:
        data = tmp_path_factory.mktemp("shard")
        srv = Server(create_app(Settings(data_dir=data, llm=llm_settings(**llm))))
        started.append(srv.__enter__())
        return srv

    yield make
    for srv in started:
        srv.__exit__(None, None, None)


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


@pytest.fixture
def wait() -> Iterator:
    yield wait_until
