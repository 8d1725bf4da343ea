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
