"""Spec: ``themis_client``'s inference calls against a real uvicorn shard with the bundled model."""

from __future__ import annotations

import pytest
from themis_client import BadRequest, NotFound, ThemisClient, ThemisError

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def themis(make_server):
    server = make_server(max_concurrent_requests=2, n_ctx=512)
    with ThemisClient(server.url, timeout=120) as c:
        yield c


def test_infer_returns_a_typed_result(themis: ThemisClient) -> None:
    out = themis.infer("The capital of France is", max_tokens=6, temperature=0)
    assert out.text and out.tokens and 0 < out.tokens <= 6
    assert out.shard_id == "shard-0" and out.timings.total_ms and out.timings.total_ms > 0


def test_stream_yields_the_same_tokens_as_infer_then_the_final_result(themis: ThemisClient) -> None:
    whole = themis.infer("Once upon a time", max_tokens=8, temperature=0)
    with themis.stream("Once upon a time", max_tokens=8, temperature=0) as s:
        tokens = list(s)
    assert "".join(t.token for t in tokens) == whole.text
    assert s.result is not None and s.result.tokens == whole.tokens


def test_refusals_raise_before_the_stream_starts(themis: ThemisClient) -> None:
    with pytest.raises((BadRequest, NotFound)) as refused:
        themis.stream("hi", max_tokens=4, adapter="no-such-adapter")
    assert refused.value.code
    with pytest.raises(ThemisError) as bad:
        themis.infer("hi", max_tokens=4, temperature=-1)
    assert 400 <= bad.value.status < 500


def test_the_async_client_streams_the_same_tokens(themis: ThemisClient) -> None:
    import asyncio

    from themis_client import AsyncThemisClient

    whole = themis.infer("Once upon a time", max_tokens=8, temperature=0)

    async def stream() -> tuple[str, int | None]:
        async with AsyncThemisClient(themis.urls[0], timeout=120) as db:
            s = await db.stream("Once upon a time", max_tokens=8, temperature=0)
            async with s:
                text = "".join([t.token async for t in s])
            return text, s.result.tokens if s.result else None

    assert asyncio.run(stream()) == (whole.text, whole.tokens)
