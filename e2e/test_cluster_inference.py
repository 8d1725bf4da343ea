"""Spec: a real 3-shard cluster with the real model routes inference — by gossiped adapter
capability for a domain, by hash when nobody announced it — scatter-gathers batches in order
(surviving a shard killed mid-batch) and embeds documents where they live."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from themis_client import InferItemError, InferResult, ThemisClient
from themis_shard.llm.model import resolve_model_path
from themis_shard.llm.native import NativeModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.llm.lora_fixture
from tests.llm.lora_fixture import make_test_lora

pytestmark = [pytest.mark.e2e, pytest.mark.llm, pytest.mark.slow]

# Every announced adapter qualifies (α > −1), so the test does not depend on how much a random
# LoRA helps: the spec under test is that the announcement travels by gossip and steers routing.
ROUTER = {"thresholds": (-1.0, -1.0, -1.0)}
GREEDY = {"max_tokens": 4, "temperature": 0}


@pytest.fixture(scope="module")
def lora_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("lora") / "legal.gguf"
    model = NativeModel(resolve_model_path("bundled"))
    try:
        make_test_lora(path, model.meta, rank=2, layers=range(0, 2))
    finally:
        model.close()
    return path


def metric(url: str, name: str, labels: str = "") -> float:
    with ThemisClient(url) as shard:
        text = shard.metrics()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (not labels or labels in line) and not line.startswith("#"):
            head = line.split(" ")[0]
            if head == name or head.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def client(url: str) -> ThemisClient:
    return ThemisClient(url, timeout=120)


def test_domain_routing_batches_and_data_local_embed(local_cluster, lora_file) -> None:
    cluster = local_cluster(3, llm=True, router=ROUTER)
    s0, s1, s2 = (client(cluster.url(s)) for s in cluster.ids)

    # An adapter for "legal" on shard-1, evaluated on load, announced through gossip to every
    # shard (each entry shard below routes by its own view).
    s1.load_adapter("legal-qa", domain="legal", path=str(lora_file), evaluate=True)
    deadline = time.monotonic() + 90
    for name, shard in (("shard-0", s0), ("shard-2", s2)):
        while time.monotonic() < deadline:
            caps = shard.cluster_status().capabilities
            if any(c.adapter_id == "legal-qa" and c.shard_id == "shard-1" for c in caps):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the adapter announcement never reached {name}")

    # Routed to the announcing shard, JSON and streamed, from any entry shard.
    assert s0.infer("The contract states", domain="legal", **GREEDY).shard_id == "shard-1"
    with s2.stream("The court", domain="legal", max_tokens=3, temperature=0) as stream:
        stream.text()
    assert stream.result is not None and stream.result.shard_id == "shard-1"

    # AQL's INFER … DOMAIN takes the same route (paper §IV-A: the gateway's domain hint).
    out = s2.aql("INFER 'gemma3-270m' @p DOMAIN 'legal' OPTIONS {max_tokens: 3}", {"p": "The statute"})
    assert out.result[0]["shard_id"] == "shard-1"

    # Nobody announced "medical": consistent-hash fallback, counted.
    before = metric(cluster.url("shard-0"), "themis_domain_routing_fallback_total")
    assert s0.infer("The patient", domain="medical", **GREEDY).text is not None
    assert metric(cluster.url("shard-0"), "themis_domain_routing_fallback_total") == before + 1

    # Scatter-gather: order preserved, each item equal to the same request sent alone.
    # Prompts whose greedy tokens are confident (top-2 margin ≥ 0.98 logits, base model and the
    # legal adapter): a batch decodes them in other batch shapes than the requests sent alone,
    # which moves logits by up to 0.69, so near-tie prompts could differ without any bug.
    prompts = [
        ("One, two,", None),
        ("1, 2, 3, 4, 5,", "legal"),
        ("10, 20, 30,", None),
        ("A, B, C, D,", "legal"),
        ("2, 4, 6, 8,", None),
        ("Monday, Tuesday,", None),
    ]
    batch = [{"prompt": p, "domain": d, "max_tokens": 4, "temperature": 0} for p, d in prompts]
    results = s2.infer_batch(batch).results
    assert len(results) == len(batch)
    for item, result in zip(batch, results, strict=True):
        assert isinstance(result, InferResult), (item, result)
        alone = s0.infer(**item)
        assert result.text == alone.text, (item, result, alone)
        if item["domain"] == "legal":
            assert result.shard_id == "shard-1"
    assert len({r.shard_id for r in results}) >= 2  # the batch was really spread
    assert metric(cluster.url("shard-2"), "themis_batch_fan_out_latency_seconds_count") >= 1

    # Data-local EMBED: text never leaves its shard; the result equals embedding the text directly.
    docs = {f"n{i}": f"note number {i} about contracts" for i in range(6)}
    for key, text in docs.items():
        s0.put("notes", key, {"text": text})
    by_urn = s0.embed(urns=[f"urn:themis:notes:{k}" for k in docs]).embeddings
    direct = s0.embed(list(docs.values())).embeddings
    for a, b in zip(by_urn, direct, strict=True):
        assert sum(x * y for x, y in zip(a, b, strict=True)) > 0.999
    assert metric(cluster.url("shard-0"), "themis_embed_urns_total", 'where="remote"') > 0
    for c in (s0, s1, s2):
        c.close()


def test_a_shard_killed_mid_batch_never_loses_an_item(local_cluster) -> None:
    cluster = local_cluster(3, llm=True)
    entry = cluster.url("shard-0")
    batch = [{"prompt": f"Count: {i},", "max_tokens": 24, "temperature": 0} for i in range(12)]
    out: dict = {}

    def send() -> None:
        with ThemisClient(entry, timeout=150) as themis_db:
            out["results"] = themis_db.infer_batch(batch, timeout_s=90).results

    t = threading.Thread(target=send)
    started = time.monotonic()
    t.start()
    time.sleep(1.5)
    cluster.kill("shard-2")
    t.join()
    assert time.monotonic() - started < 120
    results = out["results"]
    assert len(results) == 12
    answered = [r for r in results if isinstance(r, InferResult)]
    assert all(isinstance(r, InferItemError) for r in results if r not in answered)
    assert all(r.shard_id != "shard-2" for r in answered if r.shard_id)
    assert len(answered) >= 8  # retried on the survivors; an error entry only if the retry failed too


def test_shards_load_the_adapters_the_plan_places_on_them(local_cluster, lora_file) -> None:
    from themis_core.plan import AdapterPlacement, ClusterPlan

    placement = AdapterPlacement(name="legal-qa", domain="legal", source=str(lora_file), shards=("shard-1",))
    cluster = local_cluster(2, llm=True, adapters=(placement,))

    def adapters(shard: str) -> list[str]:
        with ThemisClient(cluster.url(shard)) as themis_db:
            return [a.name for a in themis_db.adapters().adapters]

    deadline = time.monotonic() + 60
    while "legal-qa" not in adapters("shard-1") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert adapters("shard-1") == ["legal-qa"] and adapters("shard-0") == []
    # The operator (here: the test) rewrites the plan without the adapter: the shard unloads it.
    plan = ClusterPlan.load(cluster.plan_path)
    cluster.plan_path.write_text(plan.model_copy(update={"adapters": ()}).to_json())
    deadline = time.monotonic() + 90  # a load still evaluating the adapter finishes first
    while adapters("shard-1") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert adapters("shard-1") == []
