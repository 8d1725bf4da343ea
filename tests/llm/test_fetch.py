"""Spec: http(s) model and adapter sources are fetched onto the weights volume, sha256-checked,
size-limited and retried on transient failures only; every refusal names its reason."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest
from themis_shard.llm.fetch import (
    FetchError,
    FetchSettings,
    SourceFetcher,
    fetch_llm_sources,
    retry_delay,
    target_name,
)
from themis_shard.llm.settings import LLMSettings

BODY = b"GGUF" + bytes(range(256)) * 64
SHA = hashlib.sha256(BODY).hexdigest()


async def _no_sleep(_: float) -> None:
    return None


def fetcher(tmp_path, **settings) -> SourceFetcher:
    return SourceFetcher(tmp_path / "weights" / "sources", FetchSettings(**settings), sleep=_no_sleep)


def fetch(f: SourceFetcher, url: str, sha256: str | None = SHA, max_bytes: int = 1 << 20):
    return asyncio.run(f.fetch(url, sha256=sha256, max_bytes=max_bytes, what="adapter"))


def test_a_source_is_downloaded_once_verified_and_reused(tmp_path, file_server):
    file_server.files["/a.gguf"] = BODY
    f = fetcher(tmp_path)
    path = fetch(f, f"{file_server.url}/a.gguf")
    assert path.read_bytes() == BODY and path.parent == tmp_path / "weights" / "sources"
    assert not list(path.parent.glob("*.part"))
    assert fetch(f, f"{file_server.url}/a.gguf") == path
    assert file_server.hits["/a.gguf"] == 1  # the verified file on the volume is reused


def test_a_wrong_sha256_is_refused_with_both_digests_and_nothing_is_kept(tmp_path, file_server):
    file_server.files["/a.gguf"] = BODY
    f = fetcher(tmp_path)
    with pytest.raises(FetchError) as err:
        fetch(f, f"{file_server.url}/a.gguf", sha256="0" * 64)
    assert err.value.code == "sha256_mismatch"
    assert f"expected {'0' * 64}, got {SHA}" in str(err.value)
    assert file_server.hits["/a.gguf"] == 1  # not retried: the same bytes would come again
    assert not any((tmp_path / "weights" / "sources").iterdir())


def test_a_file_over_the_size_limit_is_refused(tmp_path, file_server):
    file_server.files["/big.gguf"] = BODY
    with pytest.raises(FetchError, match="over the limit of 100"):
        fetch(fetcher(tmp_path), f"{file_server.url}/big.gguf", max_bytes=100)


def test_transient_failures_are_retried_and_client_errors_are_not(tmp_path, file_server):
    file_server.files["/a.gguf"] = BODY
    file_server.fail["/a.gguf"] = [503, 502]
    assert fetch(fetcher(tmp_path, retries=3), f"{file_server.url}/a.gguf").read_bytes() == BODY
    assert file_server.hits["/a.gguf"] == 3
    with pytest.raises(FetchError, match="HTTP 404"):
        fetch(fetcher(tmp_path, retries=3), f"{file_server.url}/missing.gguf")
    assert file_server.hits["/missing.gguf"] == 1
    file_server.fail["/b.gguf"] = [503] * 5
    with pytest.raises(FetchError, match="after 3 attempts: HTTP 503"):
        fetch(fetcher(tmp_path, retries=2), f"{file_server.url}/b.gguf")


def test_an_unreachable_host_fails_with_the_reason_after_the_retries(tmp_path):
    with pytest.raises(FetchError, match="could not be fetched after 2 attempts: ConnectError"):
        fetch(fetcher(tmp_path, retries=1, connect_timeout_s=1), "http://127.0.0.1:9/a.gguf")


def test_names_and_backoff_are_pure():
    assert target_name("https://h/x/model.gguf?sig=1", SHA) == f"{SHA[:16]}-model.gguf"
    assert target_name("https://a/m.gguf", None) != target_name("https://b/m.gguf", None)
    assert [retry_delay(n, 1.0) for n in (1, 2, 3, 10)] == [1.0, 2.0, 4.0, 30.0]


def test_model_sources_in_the_engine_settings_are_fetched_and_local_ones_checked(tmp_path, file_server):
    file_server.files["/m.gguf"] = BODY
    f = fetcher(tmp_path)
    llm = LLMSettings(model_path=f"{file_server.url}/m.gguf", model_sha256=SHA)
    resolved = asyncio.run(fetch_llm_sources(llm, f))
    assert resolved.model_path != llm.model_path and Path(resolved.model_path).read_bytes() == BODY
    local = tmp_path / "local.gguf"
    local.write_bytes(BODY)
    assert asyncio.run(
        fetch_llm_sources(LLMSettings(model_path=str(local), model_sha256=SHA), f)
    ).model_path == str(local)
    with pytest.raises(FetchError, match="sha256 mismatch for model"):
        asyncio.run(fetch_llm_sources(LLMSettings(model_path=str(local), model_sha256="1" * 64), f))


def test_a_shard_whose_model_cannot_be_fetched_says_why_in_its_termination_message(tmp_path, file_server):
    from fastapi.testclient import TestClient
    from themis_shard.app import create_app
    from themis_shard.settings import Settings

    log = tmp_path / "termination-log"
    settings = Settings(
        data_dir=tmp_path / "shard",
        weights_dir=tmp_path / "weights",
        termination_message_path=log,
        llm=LLMSettings(model_path=f"{file_server.url}/gone.gguf"),
    )
    with pytest.raises(FetchError), TestClient(create_app(settings)):
        pass
    assert (
        log.read_text()
        == f"source_unavailable: model {file_server.url}/gone.gguf could not be fetched: HTTP 404\n"
    )
    assert not (tmp_path / "weights" / "sources" / target_name(f"{file_server.url}/gone.gguf", None)).exists()


def test_draft_and_embedding_model_files_are_checked_too(tmp_path, file_server):
    local = tmp_path / "draft.gguf"
    local.write_bytes(BODY)
    f = fetcher(tmp_path)
    ok = LLMSettings(
        model_path=str(local), draft_model_path=str(local), draft_model_sha256=SHA, embedding_model="none"
    )
    assert asyncio.run(fetch_llm_sources(ok, f)) == ok
    with pytest.raises(FetchError, match="sha256 mismatch for draft model"):
        asyncio.run(fetch_llm_sources(ok.model_copy(update={"draft_model_sha256": "2" * 64}), f))
    file_server.files["/e.gguf"] = BODY
    emb = LLMSettings(
        model_path=str(local), embedding_model=f"{file_server.url}/e.gguf", embedding_model_sha256=SHA
    )
    fetched = asyncio.run(fetch_llm_sources(emb, f)).embedding_model
    assert Path(fetched).read_bytes() == BODY
