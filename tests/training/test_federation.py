"""Federated rounds: the round loop averages what the participants trained on their own data,
chains rounds from the published average, and leaves out shards without data (the participants
here stand in for peers; tests/llm/test_federation_llm.py and e2e/test_federated.py use real ones)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from themis_shard.training.federation import (
    FederateBody,
    LocalTrain,
    LocalUpdate,
    Publish,
    Published,
    from_wire,
    run_rounds,
    to_wire,
)
from themis_shard.training.lora import LoraWeights


def lora(value: float, rank: int = 2) -> LoraWeights:
    return LoraWeights(
        "blk.1.ffn_down.weight",
        np.full((rank, 4), value, np.float32),
        np.full((3, rank), value, np.float32),
        2.0,
    )


class Peer:
    """A participant in the loop's terms: 'trains' by adding ``step`` to the factors it starts from."""

    def __init__(self, shard_id: str, samples: int, step: float) -> None:
        self.shard_id, self.samples, self.step = shard_id, samples, step
        self.starts: list[LoraWeights | None] = []
        self.published: list[Publish] = []

    async def train(self, name: str, req: LocalTrain) -> LocalUpdate:
        start = from_wire(req.start) if req.start else None
        self.starts.append(start)
        if not self.samples:
            return LocalUpdate(shard_id=self.shard_id, samples=0)
        base = start.a[0, 0] if start is not None else 0.0
        return LocalUpdate(
            shard_id=self.shard_id,
            samples=self.samples,
            losses=[2.0, 1.5],
            lora=to_wire(lora(base + self.step)),
        )

    async def publish(self, name: str, req: Publish) -> Published:
        self.published.append(req)
        return Published(shard_id=self.shard_id, round=req.round, accuracy_delta=0.01)


BODY = FederateBody(domain="legal", collection="law", rounds=2, local_steps=3)


def test_lora_factors_survive_the_wire_bit_for_bit():
    rng = np.random.default_rng(0)
    lw = LoraWeights(
        "blk.17.ffn_down.weight",
        rng.standard_normal((8, 16), np.float32),
        rng.standard_normal((5, 8), np.float32),
        8.0,
    )
    back = from_wire(to_wire(lw))
    assert back.target == lw.target and back.alpha == lw.alpha
    assert np.array_equal(back.a, lw.a) and np.array_equal(back.b, lw.b)


def test_a_round_averages_by_sample_count_and_the_next_round_starts_from_it():
    a, b = Peer("shard-0", samples=3, step=1.0), Peer("shard-1", samples=1, step=5.0)
    rounds = asyncio.run(run_rounds("legal-fed", BODY, [a, b]))

    assert [r.round for r in rounds] == [1, 2]
    # round 1: (3·1 + 1·5) / 4 = 2; round 2 starts there: (3·3 + 1·7) / 4 = 4
    assert a.starts[0] is None and b.starts[0] is None  # the same seeded fresh LoRA everywhere
    assert a.starts[1].a[0, 0] == pytest.approx(2.0) and b.starts[1].a[0, 0] == pytest.approx(2.0)
    assert from_wire(a.published[1].lora).a[0, 0] == pytest.approx(4.0)
    assert [p.round for p in a.published] == [1, 2] and [p.training_samples for p in b.published] == [4, 4]
    assert rounds[0].training_samples == 4
    assert {u["shard_id"]: u["samples"] for u in rounds[0].updates} == {"shard-0": 3, "shard-1": 1}


def test_a_shard_without_the_domains_data_sits_out_and_is_not_published_to():
    a, empty = Peer("shard-0", samples=2, step=1.0), Peer("shard-1", samples=0, step=9.0)
    (only,) = asyncio.run(run_rounds("legal-fed", BODY.model_copy(update={"rounds": 1}), [a, empty]))
    assert only.training_samples == 2 and from_wire(a.published[0].lora).a[0, 0] == pytest.approx(1.0)
    assert empty.published == [] and [p.shard_id for p in only.published] == ["shard-0"]


def test_rounds_continue_from_the_current_global_adapter():
    a = Peer("shard-0", samples=1, step=1.0)
    (r,) = asyncio.run(
        run_rounds("legal-fed", BODY.model_copy(update={"rounds": 1}), [a], start=(lora(10.0), 3))
    )
    assert r.round == 4 and a.starts[0].a[0, 0] == pytest.approx(10.0)


def test_no_data_anywhere_is_a_clear_400():
    from themis_shard.errors import BadRequest

    with pytest.raises(BadRequest) as err:
        asyncio.run(run_rounds("legal-fed", BODY, [Peer("shard-0", 0, 1.0)]))
    assert err.value.code == "no_training_data"


def test_the_cli_prints_one_line_per_round():
    from themis_shard.local_cluster import build_parser
    from themis_shard.training.cli import round_line

    args = build_parser().parse_args(
        [
            "adapters",
            "federate",
            "legal-fed",
            "--domain",
            "legal",
            "--collection",
            "law",
            "--local-steps",
            "3",
        ]
    )
    assert (args.name, args.domain, args.collection, args.rounds, args.local_steps) == (
        "legal-fed",
        "legal",
        "law",
        1,
        3,
    )
    line = round_line(
        {
            "round": 1,
            "training_samples": 16,
            "updates": [{"shard_id": "shard-0", "samples": 9}, {"shard_id": "shard-1", "samples": 7}],
            "published": [{"shard_id": "shard-0", "accuracy_delta": 0.0123}, {"shard_id": "shard-1"}],
        }
    )
    assert line == "round 1: 16 samples (shard-0:9, shard-1:7); shard-0 α=+0.0123, shard-1 α=?"
