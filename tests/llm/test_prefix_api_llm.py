"""/internal/kv_prefix through two real uvicorn servers running the real shard app:
a state exported by one shard and imported by the other decodes like a full prefill there, and
incompatible, truncated, random or garbage blobs are refused with 4xx while the shard lives on."""

from __future__ import annotations

import json
import random
import struct

import httpx
import pytest
from themis_shard.llm.kv_blob import MAGIC, MEDIA_TYPE

pytestmark = pytest.mark.llm

MODEL = "gemma3-270m"


def long_text(n_rules: int = 22) -> str:
    text = (
        "You are Themis, a careful assistant for a distributed database. Answer precisely and "
        "never invent numbers. "
    )
    for i in range(1, n_rules):
        text += f"Rule {i}: shard {i % 7} keeps replica {i % 3} of range {i * 37 % 101}. "
    return text


@pytest.fixture(scope="module")
def shards(make_server):
    kw = dict(max_concurrent_requests=4, n_ctx=2048, prefix_min_tokens=64)
    return make_server(**kw), make_server(**kw)


def infer(url: str, prompt: str, n: int = 10) -> dict:
    r = httpx.post(f"{url}/v1/infer", json={"prompt": prompt, "max_tokens": n, "temperature": 0}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def hook(server):
    return server.llm.models[MODEL].prefix


def rewrite(data: bytes, **changes) -> bytes:
    (hlen,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    header = json.loads(data[start : start + hlen])
    for k, v in changes.items():
        header[k] = {**header[k], **v} if isinstance(v, dict) else v
    h = json.dumps(header).encode()
    return MAGIC + struct.pack("<I", len(h)) + h + data[start + hlen :]


def test_export_import_between_shards_decodes_like_a_full_prefill(shards, native_model):
    from .conftest import NOISE_LOGITS
    from .reference import greedy_reference

    a, b = shards
    prompt = long_text() + "Question: which shard keeps range 74? Answer:"
    cold_a = infer(a.url, prompt)
    listing = httpx.get(f"{a.url}/internal/kv_prefix").json()
    assert len(listing["entries"]) == 1
    key, n = listing["entries"][0]["hash"], listing["entries"][0]["n_tokens"]
    r = httpx.get(f"{a.url}/internal/kv_prefix/{key}")
    assert r.status_code == 200 and r.headers["content-type"] == MEDIA_TYPE
    blob = r.content
    imp = httpx.post(f"{b.url}/internal/kv_prefix/import", content=blob, headers={"content-type": MEDIA_TYPE})
    assert imp.status_code == 200, imp.text
    assert imp.json() == {"hash": key, "n_tokens": n, "bytes": len(hook(a).cache.get(key).state)}
    warm_b = infer(b.url, prompt)
    assert hook(b).restores == 1 and hook(b).saves == 0  # nothing prefilled up to the boundary
    tokens = native_model.tokenize(prompt)
    ref = greedy_reference(native_model, tokens, 10)
    # /v1/infer returns text: equal to the plain single-sequence reference unless it had a near tie
    assert warm_b["text"] == native_model.detokenize(ref[0]) or min(ref[1]) <= NOISE_LOGITS
    assert cold_a["text"] == native_model.detokenize(ref[0]) or min(ref[1]) <= NOISE_LOGITS
    assert warm_b["timings"]["ttft_ms"] < cold_a["timings"]["ttft_ms"]
    metrics = httpx.get(f"{b.url}/metrics").text
    assert 'themis_kv_prefix_hits_total{model="gemma3-270m"} 1.0' in metrics
    assert (
        'themis_kv_prefix_transfers_total{direction="import",model="gemma3-270m",outcome="ok"} 1.0' in metrics
    )


@pytest.mark.parametrize(
    ("mutate", "status", "code"),
    [
        (lambda d: rewrite(d, model={"sha256": "0" * 64}), 409, "incompatible_model"),
        (lambda d: rewrite(d, context={"flash_attn": 1}), 409, "incompatible_context"),
        (lambda d: rewrite(d, context={"type_v": 8}), 409, "incompatible_context"),
        (lambda d: rewrite(d, n_ctx_min=100_000), 409, "context_too_small"),
        (lambda d: d[: len(d) // 2], 400, "truncated"),
        (lambda d: d[:-1], 400, "truncated"),
        (lambda d: random.Random(1).randbytes(5000), 400, "not_a_kv_prefix"),
        (lambda d: d[:-100] + bytes(100), 400, "checksum_mismatch"),
    ],
)
def test_bad_blobs_are_refused_and_the_shard_lives(shards, mutate, status, code):
    a, b = shards
    key = httpx.get(f"{a.url}/internal/kv_prefix").json()["entries"][0]["hash"]
    blob = httpx.get(f"{a.url}/internal/kv_prefix/{key}").content
    before = len(hook(b).cache)
    r = httpx.post(f"{b.url}/internal/kv_prefix/import", content=mutate(blob))
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert len(hook(b).cache) == before
    assert httpx.get(f"{b.url}/health").status_code == 200


def test_garbage_state_with_a_valid_envelope_is_refused_by_the_trial_load(shards, native_model):
    """Checksum and hash are right (an attacker can compute them); the state bytes are noise.
    llama.cpp must refuse it in the trial load (422) and the shard keeps serving."""
    import hashlib

    a, b = shards
    hook(b)
    key = httpx.get(f"{a.url}/internal/kv_prefix").json()["entries"][0]["hash"]
    blob = httpx.get(f"{a.url}/internal/kv_prefix/{key}").content
    (hlen,) = struct.unpack_from("<I", blob, len(MAGIC))
    start = len(MAGIC) + 4
    header = json.loads(blob[start : start + hlen])
    tok = blob[start + hlen : start + hlen + 4 * header["n_tokens"]]
    rng = random.Random(3)
    for state in (rng.randbytes(4096), b"\x00" * 64, rng.randbytes(header["state_bytes"])):
        d = rewrite(blob, state_bytes=len(state), checksum=hashlib.sha256(tok + state).hexdigest())
        d = d[: len(d) - header["state_bytes"]] + state
        r = httpx.post(f"{b.url}/internal/kv_prefix/import", content=d)
        assert r.status_code == 422, r.text
    assert httpx.get(f"{b.url}/health").status_code == 200
    assert infer(b.url, "The quick brown fox", 4)["tokens"] >= 1


def test_unknown_prefix_is_404(shards):
    assert httpx.get(f"{shards[0].url}/internal/kv_prefix/{'0' * 32}").status_code == 404
