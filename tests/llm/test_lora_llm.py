"""LoRA adapters at runtime: load/unload through /v1/adapters, per-request use, evaluation hook."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from themis_shard.domains.sets import validation_set

from .conftest import NOISE_LOGITS, wait_until
from .lora_fixture import make_test_lora, write_lora
from .reference import first_divergence, greedy_reference

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


@pytest.fixture(autouse=True)
def no_adapters_left(http):
    """Each spec starts from the base model alone, whatever the previous one left behind."""
    yield
    for a in http.get("/v1/adapters").json()["adapters"]:
        http.delete(f"/v1/adapters/{a['name']}")


def assert_matches_reference(model, ref: tuple[list[int], list[float]], got: str) -> None:
    """``got`` is the greedy text of ``ref``'s tokens, or departs from it only where the
    reference itself was a near-tie (batch shapes move logits by up to NOISE_LOGITS)."""
    tokens, margins = ref
    for i in range(len(tokens)):
        if not got.startswith(model.detokenize(tokens[: i + 1])):
            assert margins[i] <= NOISE_LOGITS, (
                f"{got!r} left the reference {model.detokenize(tokens)!r} at a confident token {i} "
                f"(top-2 margin {margins[i]:.3f})"
            )
            return


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


def test_an_http_adapter_source_is_fetched_checked_and_loaded(http, adapter_files, file_server):
    import hashlib

    body = adapter_files["legal"].read_bytes()
    file_server.files["/legal.gguf"] = body
    url = f"{file_server.url}/legal.gguf"
    wrong = http.post(
        "/v1/adapters", json={"name": "legal", "source": url, "sha256": "0" * 64, "evaluate": False}
    )
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "sha256_mismatch"
    assert "expected " + "0" * 64 in wrong.json()["error"]["message"]
    assert http.get("/v1/adapters").json()["adapters"] == []
    sha = hashlib.sha256(body).hexdigest()
    r = http.post("/v1/adapters", json={"name": "legal", "source": url, "sha256": sha, "evaluate": False})
    assert r.status_code == 201 and r.json()["sha256"] == sha
    assert text(http, adapter="legal") != text(http)
    gone = http.post("/v1/adapters", json={"name": "tax", "source": f"{file_server.url}/nope.gguf"})
    assert gone.status_code == 502 and gone.json()["error"]["code"] == "source_unavailable"
    assert "HTTP 404" in gone.json()["error"]["message"]


#: One prompt per adapter on which that adapter's greedy output departs *confidently* (top-2
#: margin above NOISE_LOGITS) from the other two: a request decoded under the wrong adapter
#: cannot pass as batch-shape noise. Found by measuring the seeded fixture adapters.
DISCRIMINATING = {
    None: "1, 2, 3, 4, 5, 6, 7,",
    "legal": "The alphabet begins with A, B,",
    "medical": "red, orange, yellow,",
}


def test_several_adapters_resident_and_served_in_one_engine(server, http, adapter_files):
    for name in ("legal", "medical"):
        r = http.post(
            "/v1/adapters",
            json={"name": name, "domain": name, "path": str(adapter_files[name]), "evaluate": False},
        )
        assert r.status_code == 201
    model = server.llm.models["gemma3-270m"]
    native, engine = model.native, model.engine
    n = PROMPT["max_tokens"]

    def reference(prompt: str, adapter: str | None):
        return greedy_reference(
            native, native.tokenize(prompt), n, adapters=[engine.adapters[adapter]] if adapter else None
        )

    refs = {a: reference(p, a) for a, p in DISCRIMINATING.items()}
    for a, p in DISCRIMINATING.items():  # the spec below can tell the adapters apart
        for other in DISCRIMINATING.keys() - {a}:
            i = first_divergence(refs[a][0], reference(p, other)[0])
            assert i is not None and refs[a][1][i] > NOISE_LOGITS, (a, other, i)
    jobs = [a for a in DISCRIMINATING for _ in range(3)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(
            pool.map(
                lambda a: http.post(
                    "/v1/infer", json={"prompt": DISCRIMINATING[a], "max_tokens": n, "adapter": a}
                ).json(),
                jobs,
            )
        )
    for a, res in zip(jobs, results, strict=True):
        assert res["tokens"] == n and res["adapter"] == a
        # mixed adapter groups in one engine: each request decoded under its own adapter only
        assert_matches_reference(native, refs[a], res["text"])
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
    # 12 held-out pairs scored with and without the adapter: minutes on a loaded 2-core machine
    assert wait_until(lambda: http.get("/v1/adapters/legal").json()["evaluation"] is not None, timeout=400)
    ev = http.get("/v1/adapters/legal").json()["evaluation"]
    assert -1.0 <= ev["accuracy_delta"] <= 1.0
    # a random adapter makes the reference completions less likely, not more
    assert ev["accuracy_delta"] < 0 and ev["adapter_token_probability"] < ev["base_token_probability"]
    assert ev["base_p99_ms"] > 0 and isinstance(ev["performance_delta_p99_ms"], float)
    # measured on its domain's held-out set, not a generic one
    assert ev["validation_set"] == "legal" and ev["validation_items"] == len(validation_set("legal"))
    assert http.delete("/v1/adapters/legal").status_code == 200


@pytest.mark.parametrize("measure", ["scoring", "latencies"])
def test_an_evaluation_whose_decode_fails_is_an_error_not_a_number(measure):
    """A refused ``llama_decode`` must not become a log-probability or a latency."""
    from themis_shard.llm.lora_eval import completion_logprob, decode_latencies
    from themis_shard.llm.native import Batch

    class RefusingContext:
        def clear(self) -> None:
            pass

        def decode(self, batch) -> int:
            return -1

    batch = Batch(16)
    with pytest.raises(RuntimeError, match="llama_decode returned -1"):
        if measure == "scoring":
            completion_logprob(RefusingContext(), batch, [1, 2], [3])  # type: ignore[arg-type]
        else:
            decode_latencies(RefusingContext(), batch, [1, 2], 3)  # type: ignore[arg-type]
