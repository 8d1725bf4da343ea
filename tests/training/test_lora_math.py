"""LoRA training math, pure: hand-written gradients match finite differences, Adam lowers the
loss, FedAvg weights by sample count, and the GGUF round-trips."""

from __future__ import annotations

import numpy as np
import pytest
from themis_shard.training.fedavg import fedavg
from themis_shard.training.forward import Prefix, gelu_tanh, rms_norm, rope_neox
from themis_shard.training.lora import (
    LoraWeights,
    loss_and_grads,
    mean_loss,
    read_lora_gguf,
    train,
    write_lora_gguf,
)


class TinyWeights:
    """The head of a toy model: the tensors ``loss_and_grads`` reads."""

    def __init__(self, vocab=11, d=6, seed=0) -> None:
        rng = np.random.default_rng(seed)
        self.eps = 1e-6
        self.n_layer = 2
        self._t = {
            "blk.1.post_ffw_norm.weight": (1 + 0.1 * rng.standard_normal(d)).astype(np.float32),
            "output_norm.weight": (1 + 0.1 * rng.standard_normal(d)).astype(np.float32),
            "token_embd.weight": rng.standard_normal((vocab, d)).astype(np.float32),
            "blk.1.ffn_down.weight": np.zeros((d, 8), np.float32),  # its shape: the LoRA's
        }

    def __getitem__(self, name):
        return self._t[name]

    def last(self) -> int:
        return 1


def tiny_prefix(seed: int, t=5, d=6, ff=8, vocab=11) -> Prefix:
    rng = np.random.default_rng(seed)
    return Prefix(
        tokens=rng.integers(0, vocab, t),
        ffn_act=rng.standard_normal((t, ff)).astype(np.float32),
        down=rng.standard_normal((t, d)).astype(np.float32),
        residual=rng.standard_normal((t, d)).astype(np.float32),
    )


def tiny_lora(seed=1, rank=2, d=6, ff=8) -> LoraWeights:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rank, ff)).astype(np.float64)
    b = rng.standard_normal((d, rank)).astype(np.float64)
    return LoraWeights("blk.1.ffn_down.weight", a, b, alpha=4.0)


def test_gradients_match_finite_differences():
    w, pre, lora = TinyWeights(), tiny_prefix(0), tiny_lora()
    w._t = {k: v.astype(np.float64) for k, v in w._t.items()}
    pre = Prefix(pre.tokens, *(x.astype(np.float64) for x in (pre.ffn_act, pre.down, pre.residual)))
    _, ga, gb, _ = loss_and_grads(w, pre, lora)
    h = 1e-6
    for param, grad in ((lora.a, ga), (lora.b, gb)):
        for idx in [(0, 0), (1, 1), (0, 1)]:
            old = param[idx]
            param[idx] = old + h
            up = loss_and_grads(w, pre, lora)[0]
            param[idx] = old - h
            down = loss_and_grads(w, pre, lora)[0]
            param[idx] = old
            assert grad[idx] == pytest.approx((up - down) / (2 * h), rel=1e-4, abs=1e-7)


def test_training_lowers_the_loss_from_a_zero_delta():
    w = TinyWeights()
    prefixes = [tiny_prefix(s) for s in range(4)]
    res = train(w, prefixes, steps=60, rank=2, alpha=2.0, lr=0.05, batch=4)
    assert np.allclose(
        mean_loss(w, prefixes, LoraWeights(res.lora.target, res.lora.a, res.lora.b * 0, 2.0)),
        mean_loss(w, prefixes, None),
        atol=1e-5,
    )  # B = 0: exactly the base model
    assert mean_loss(w, prefixes, res.lora) < mean_loss(w, prefixes, None) - 0.1
    assert res.samples == 4 and len(res.losses) == 60


def test_fedavg_weights_by_samples_and_refuses_mismatches():
    x, y = tiny_lora(1), tiny_lora(2)
    avg, total = fedavg([(x, 1), (y, 3)])
    assert total == 4
    assert np.allclose(avg.a, 0.25 * x.a + 0.75 * y.a, atol=1e-6) and np.allclose(
        avg.b, 0.25 * x.b + 0.75 * y.b, atol=1e-6
    )
    with pytest.raises(ValueError):
        fedavg([(x, 1), (tiny_lora(3, rank=3), 1)])
    with pytest.raises(ValueError):
        fedavg([])


def test_lora_gguf_round_trips_with_what_the_shard_announces(tmp_path):
    lora = tiny_lora()
    path = write_lora_gguf(
        tmp_path / "a.gguf",
        "gemma3",
        lora,
        name="legal",
        domain="legal",
        training_samples=16,
        federation_round=2,
        validation=[("Q", " A")],
    )
    back, meta = read_lora_gguf(path)
    assert back.target == lora.target and np.allclose(back.a, lora.a) and np.allclose(back.b, lora.b)
    assert meta["general.type"] == "adapter" and meta["adapter.type"] == "lora"
    assert meta["themis.training_samples"] == 16 and meta["themis.federation_round"] == 2
    assert meta["themis.validation"] == '{"prompt": "Q", "completion": " A"}'


def test_forward_building_blocks():
    x = np.array([[3.0, 4.0]], np.float32)
    assert np.allclose(rms_norm(x, np.ones(2, np.float32), 0.0), x / np.sqrt(12.5))
    assert gelu_tanh(np.array([0.0]))[0] == 0.0 and gelu_tanh(np.array([10.0]))[0] == pytest.approx(10.0)
    v = np.random.default_rng(0).standard_normal((3, 1, 4)).astype(np.float32)
    r = rope_neox(v, 10_000.0)
    assert np.allclose(r[0], v[0]) and np.allclose(
        np.linalg.norm(r, axis=-1), np.linalg.norm(v, axis=-1), atol=1e-5
    )
