"""LoRA adapters at runtime: load/unload through /v1/adapters, per-request use, evaluation hook."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from themis_shard.llm.tools.lora_fixture import make_test_lora, write_lora

from .conftest import wait_until

pytestmark = pytest.mark.llm

PROMPT = {"prompt": "The capital of France is", "max_tokens": 6}


@pytest.fixture(scope="module")
def server(make_server):
    return make_server(n_ctx=1024, max_concurrent_requests=8)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def adapter_files(server, tmp_path_factory):
    meta = server.llm.models["gemma3-270m"].native.meta
    d = tmp_path_factory.mktemp("adapters")
    return {
        name: make_test_lora(d / f"{name}.gguf", meta, rank=4, seed=seed)
        for name, seed in (("legal", 1), ("medical", 2))
    }


def text(http, **extra) -> str:
    r = http.post("/v1/infer", json={**PROMPT, **extra})
    assert r.status_code == 200, r.text
    return r.json()["text"]


def test_load_use_and_unload_an_adapter(http, adapter_files):
    base = text(http)
    r = http.post(
        "/v1/adapters",
        json={"name": "legal", "domain": "legal", "path": str(adapter_files["legal"]), "evaluate": False},
    )
    assert r.status_code == 201 and r.json()["name"] == "legal" and r.json()["alpha"] == 8.0
    assert [a["name"] for a in http.get("/v1/adapters").json()["adapters"]] == ["legal"]
    with_adapter = text(http, adapter="legal")
    assert with_adapter != base
    assert text(http, domain="legal") == with_adapter  # the domain routes to its adapter
    assert text(http, domain="tax") == base  # no adapter for that domain: base model
    assert text(http) == base  # other requests are unaffected
    assert (
        http.post("/v1/adapters", json={"name": "legal", "path": str(adapter_files["legal"])}).status_code
        == 409
    )
    assert http.delete("/v1/adapters/legal").status_code == 200
    assert http.post("/v1/infer", json={**PROMPT, "adapter": "legal"}).status_code == 404
    assert http.delete("/v1/adapters/legal").status_code == 404
    assert text(http) == base


def test_several_adapters_resident_and_served_in_one_engine(server, http, adapter_files):
    for name in ("legal", "medical"):
        r = http.post(
            "/v1/adapters",
            json={"name": name, "domain": name, "path": str(adapter_files[name]), "evaluate": False},
        )
        assert r.status_code == 201
    solo = {a: text(http, adapter=a) if a else text(http) for a in ("legal", "medical", None)}
    assert len(set(solo.values())) == 3
    jobs = [a for a in ("legal", "medical", None) for _ in range(3)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda a: http.post("/v1/infer", json={**PROMPT, "adapter": a}).json(), jobs))
    for a, res in zip(jobs, results, strict=True):
        assert res["tokens"] == 6 and res["adapter"] == a
    assert sum(res["text"] == solo[a] for a, res in zip(jobs, results, strict=True)) >= len(jobs) - 1
    assert "themis_active_lora_adapters 2.0" in http.get("/metrics").text
    for name in ("legal", "medical"):
        assert http.delete(f"/v1/adapters/{name}").status_code == 200
    assert "themis_active_lora_adapters 0.0" in http.get("/metrics").text


def test_malformed_adapter_files_are_refused(http, tmp_path, server):
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGUF\x03\x00\x00\x00 definitely not a gguf")
    wrong_arch = write_lora(tmp_path / "llama.gguf", "llama", {"blk.0.attn_q.weight": (1024, 640)})
    wrong_shape = write_lora(tmp_path / "shape.gguf", "gemma3", {"blk.0.attn_q.weight": (1024, 999)})
    wrong_tensor = write_lora(tmp_path / "tensor.gguf", "gemma3", {"blk.99.attn_q.weight": (1024, 640)})
    for path, code in (
        (garbage, "invalid_adapter"),
        (wrong_arch, "invalid_adapter"),
        (wrong_shape, "invalid_adapter"),
        (wrong_tensor, "invalid_adapter"),
        (tmp_path / "missing.gguf", "adapter_file_not_found"),
    ):
        r = http.post("/v1/adapters", json={"name": "bad", "path": str(path)})
        assert r.status_code == 400 and r.json()["error"]["code"] == code, (path.name, r.text)
    assert http.post("/v1/adapters", json={"name": "Bad Name!", "path": str(garbage)}).status_code == 400
    assert http.get("/v1/adapters").json()["adapters"] == []
    assert text(http)  # still serving


def test_evaluation_hook_measures_accuracy_and_latency_deltas(http, adapter_files):
    r = http.post(
        "/v1/adapters",
        json={"name": "legal", "domain": "legal", "path": str(adapter_files["legal"]), "evaluate": True},
    )
    assert r.status_code == 201
    assert wait_until(lambda: http.get("/v1/adapters/legal").json()["evaluation"] is not None, timeout=60)
    ev = http.get("/v1/adapters/legal").json()["evaluation"]
    assert -1.0 <= ev["accuracy_delta"] <= 1.0
    # a random adapter makes the reference completions less likely, not more
    assert ev["accuracy_delta"] < 0 and ev["adapter_token_probability"] < ev["base_token_probability"]
    assert ev["base_p99_ms"] > 0 and isinstance(ev["performance_delta_p99_ms"], float)
    assert http.delete("/v1/adapters/legal").status_code == 200
