"""Where llama.cpp computes: each context on one long-lived thread, one-off work on a thread that
ends with it.

GNU OpenMP keeps a worker pool per thread that has computed; once a process's pools hold more
threads than cores, every graph barrier sleeps in the kernel and decoding runs at about half
speed (a shard decoded at 21 tok/s, its engine alone at 39, on 2 cores). These specs pin the
threads; bench/engine.py measures the speed."""

from __future__ import annotations

import asyncio
import functools
import threading
import time

import pytest
from themis_shard.llm.compute_threads import on_own_thread, oversubscription, run_once
from themis_shard.llm.runtime import LLMRuntime
from themis_shard.llm.sampling import SamplingParams

from .conftest import llm_settings
from .test_engine_llm import Collector

pytestmark = pytest.mark.llm


def recording(method, seen: list[str]):
    def record(*args, **kwargs):
        seen.append(threading.current_thread().name)
        return method(*args, **kwargs)

    return record


def test_an_engine_decodes_only_on_its_own_thread_its_warm_up_included(native_model):
    from themis_shard.llm.engine import Engine, EngineConfig

    engine = Engine(native_model, EngineConfig(n_ctx=512, n_threads=2))
    seen: list[str] = []
    engine.ctx.decode = recording(engine.ctx.decode, seen)
    engine.start()
    try:
        assert seen, "start() returns after the warm-up decode"
        out = Collector()
        engine.submit(native_model.tokenize("The quick brown fox"), SamplingParams(max_tokens=4), out)
        assert out.done.completion_tokens == 4
    finally:
        engine.stop()
    assert set(seen) == {engine._thread.name}


@pytest.mark.parametrize(
    "decode",
    [lambda batch: (_ for _ in ()).throw(RuntimeError("no compute today")), lambda batch: -3],
    ids=["raises", "returns an error code"],
)
def test_a_failed_warm_up_is_raised_by_start(native_model, decode):
    from themis_shard.llm.engine import Engine, EngineConfig

    engine = Engine(native_model, EngineConfig(n_ctx=512, n_threads=2))
    engine.ctx.decode = decode
    with pytest.raises(RuntimeError, match=r"no compute today|llama_decode returned -3"):
        engine.start()
    engine.stop()


def test_where_a_model_is_served_embeddings_are_encoded_on_its_engine_thread():
    runtime = LLMRuntime(llm_settings(embedding_model="bundled", n_ctx=512))

    async def scenario() -> list[str]:
        await runtime.start()
        try:
            seen: list[str] = []
            runtime.embedder.ctx.encode = recording(runtime.embedder.ctx.encode, seen)
            vectors = await runtime.embed(["one text", "another text"])
            assert len(vectors) == 2 and len(vectors[0]) == runtime.embedder.dimension
            return seen
        finally:
            await runtime.stop()

    seen = asyncio.run(scenario())
    assert seen and all(name.startswith("llm-engine-") for name in seen), seen


def test_a_one_off_computation_runs_on_a_thread_that_ends_with_it():
    names: list[str] = []

    def work() -> int:
        names.append(threading.current_thread().name)
        return 42

    assert on_own_thread(work, "oneoff-spec").result(10) == 42
    assert names == ["oneoff-spec"]
    assert _ends("oneoff-spec")
    assert asyncio.run(run_once(work)) == 42

    def fails() -> None:
        raise ValueError("bad adapter")

    with pytest.raises(ValueError, match="bad adapter"):
        on_own_thread(fails).result(10)


def _ends(name: str) -> bool:
    """No thread of that name is left once those still finishing have (within 5 s)."""
    for t in threading.enumerate():
        if t.name == name:
            t.join(5)
    return not any(t.name == name for t in threading.enumerate())


def test_a_draft_shard_drafts_on_its_engine_thread():
    runtime = LLMRuntime(llm_settings(n_ctx=512))

    async def scenario() -> list[str]:
        await runtime.start()
        try:
            service = runtime.draft_service()
            seen: list[str] = []
            service.source.ctx.decode = recording(service.source.ctx.decode, seen)
            tokens = runtime.models[runtime.settings.model_alias].native.tokenize("The quick brown fox")
            work = functools.partial(service.draft, "spec", 0, tokens, 3, SamplingParams(max_tokens=3))
            drafted = await asyncio.wrap_future(service.run(work))
            assert len(drafted["tokens"]) == 3
            return seen
        finally:
            await runtime.stop()

    seen = asyncio.run(scenario())
    assert seen and all(name.startswith("llm-engine-") for name in seen), seen


def test_engines_whose_pools_outnumber_the_cores_are_warned_about_with_the_setting_to_change():
    assert oversubscription(engines=1, threads=2, cores=2) is None
    assert oversubscription(engines=2, threads=1, cores=2) is None
    assert oversubscription(engines=2, threads=4, cores=8) is None
    warning = oversubscription(engines=2, threads=2, cores=2)
    assert warning is not None and "THEMIS_LLM_N_THREADS to 1" in warning


def until(condition, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_an_engine_computes_on_its_share_of_the_hosts_cores_and_frees_it_when_idle(native_model, tmp_path):
    """And what it computes does not depend on its share: greedy answers are the same token for
    token on one thread or two (llama.cpp splits work by output rows), so a replay reproduces."""
    from themis_shard.llm.engine import Engine, EngineConfig
    from themis_shard.llm.host_cores import QUIET_MS, HostCores, create

    path = tmp_path / "host-cores"
    create(path)
    mine, other = HostCores(path, 0, 2), HostCores(path, 1, 2)
    engine = Engine(native_model, EngineConfig(n_ctx=512, n_threads=1), cores=mine)
    engine.start()
    try:

        def generate() -> tuple[int, list[int]]:
            out = Collector()
            engine.submit(native_model.tokenize("The quick brown fox"), SamplingParams(max_tokens=12), out)
            assert out.done.completion_tokens == 12
            return engine.call(lambda: engine.ctx.threads).result(), out.tokens

        alone = generate()
        assert alone[0] == 2  # alone on the host: both cores
        other.mark("default", True)
        shared = generate()
        assert shared[0] == 1  # another shard's engine is computing
        assert shared[1] == alone[1]
        assert until(lambda: other.threads() == 2)  # between requests this engine holds no share
        other.mark("default", False)
        time.sleep(QUIET_MS / 1000)  # its share is lent once it has been idle a moment
        assert generate() == alone
    finally:
        engine.stop()
    assert until(lambda: other.threads() == 2)  # a stopped engine holds no share
    mine.close()
    other.close()
