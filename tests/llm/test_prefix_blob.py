"""KV-prefix blob format: round trip, every incompatibility refused, and a fuzz run in
which nothing but ``BlobError`` ever comes out of ``decode``."""

from __future__ import annotations

import json
import random
import struct

import pytest
from themis_shard.llm import kv_blob
from themis_shard.llm.kv_blob import MAGIC, BlobError, Expect
from themis_shard.llm.prefix_cache import block_hashes, chain_seed

MODEL = {"architecture": "gemma3", "quantisation": "Q4_K_M", "sha256": "ab" * 32}
CONTEXT = {"type_k": 1, "type_v": 1, "flash_attn": -1, "swa_full": True, "kv_unified": True, "n_stream": 1}
SEED = chain_seed(MODEL["sha256"], 16, CONTEXT)
EXPECT = Expect(
    model=MODEL, context=CONTEXT, n_ctx=1024, n_vocab=1000, block=16, seed=SEED, max_bytes=1 << 20
)
TOKENS = list(range(1, 33))
STATE = bytes(range(256)) * 8


def blob(**over) -> bytes:
    kw = dict(model=MODEL, context=CONTEXT, block=16, tokens=TOKENS, state=STATE)
    kw.update(over)
    kw.setdefault("key", block_hashes(kw["tokens"], kw["block"], SEED)[-1])
    return kv_blob.encode(**kw)


def refused(data: bytes, expect: Expect = EXPECT) -> BlobError:
    with pytest.raises(BlobError) as exc:
        kv_blob.decode(data, expect)
    return exc.value


def rewrite_header(data: bytes, **changes) -> bytes:
    (hlen,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    header = json.loads(data[start : start + hlen])
    for k, v in changes.items():
        if isinstance(v, dict):
            header[k] = {**header[k], **v}
        else:
            header[k] = v
    h = json.dumps(header).encode()
    return MAGIC + struct.pack("<I", len(h)) + h + data[start + hlen :]


def test_round_trip():
    b = kv_blob.decode(blob(), EXPECT)
    assert b.tokens == TOKENS and b.state == STATE and b.key == block_hashes(TOKENS, 16, SEED)[-1]
    assert b.header["n_ctx_min"] == 33 and b.header["model"] == MODEL and b.header["context"] == CONTEXT


@pytest.mark.parametrize(
    ("change", "code", "status"),
    [
        ({"model": {"sha256": "cd" * 32}}, "incompatible_model", 409),  # same shape, other weights
        ({"model": {"quantisation": "Q8_0"}}, "incompatible_model", 409),
        ({"context": {"type_k": 0}}, "incompatible_context", 409),
        ({"context": {"flash_attn": 1}}, "incompatible_context", 409),
        ({"context": {"kv_unified": False, "n_stream": 4}}, "incompatible_context", 409),
        ({"context": {"swa_full": 1}}, "incompatible_context", 409),  # 1 is not True
        ({"n_ctx_min": 4096}, "context_too_small", 409),
        ({"n_ctx_min": 3}, "invalid_header", 400),
        ({"block": 32}, "incompatible_block", 409),
        ({"hash": "0" * 32}, "hash_mismatch", 400),
        ({"checksum": "0" * 64}, "checksum_mismatch", 400),
        ({"n_tokens": 31}, "invalid_header", 400),
        ({"n_tokens": 48, "n_ctx_min": 49}, "truncated", 400),
        ({"n_tokens": "32"}, "invalid_header", 400),
        ({"state_bytes": len(STATE) + 1}, "truncated", 400),
        ({"format": 2}, "invalid_header", 400),
    ],
)
def test_incompatible_or_inconsistent_headers_are_refused(change, code, status):
    err = refused(rewrite_header(blob(), **change))
    assert (err.code, err.status) == (code, status), err.message


def test_context_lower_bound_and_vocabulary_are_checked():
    from dataclasses import replace

    small = replace(EXPECT, n_ctx=32)
    assert refused(blob(), small).code == "context_too_small"
    bad = [5000, *TOKENS[1:]]
    assert refused(blob(tokens=bad, key=block_hashes(bad, 16, SEED)[-1])).code == "invalid_tokens"


def test_truncated_blobs_are_refused_at_every_length():
    data = blob()
    for n in list(range(0, 200)) + list(range(200, len(data), 97)):
        err = refused(data[:n])
        assert err.status == 400


def test_fuzz_random_and_mutated_blobs_only_raise_blob_error():
    rng = random.Random(7)
    data = blob()
    samples = [bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 400))) for _ in range(300)]
    samples += [MAGIC + bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 200))) for _ in range(300)]
    for _ in range(600):
        m = bytearray(data)
        for _ in range(rng.randrange(1, 6)):
            m[rng.randrange(len(m))] = rng.getrandbits(8)
        samples.append(bytes(m))
    for s in samples:
        try:
            kv_blob.decode(s, EXPECT)
        except BlobError as exc:
            assert 400 <= exc.status < 500
        else:  # only a flip that leaves header, tokens and checksum intact can pass
            assert s == data


def test_oversized_blob_is_refused_before_parsing():
    from dataclasses import replace

    assert refused(blob(), replace(EXPECT, max_bytes=100)).status == 413
