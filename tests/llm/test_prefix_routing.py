"""Prefix-aware routing (pure): the holder of the longest prefix wins when its load allows; a
request without a domain on a host whose engines share its cores joins the host's batching
engine, the first with room in its batch."""

from __future__ import annotations

from themis_shard.cluster.routing.prefix_routing import (
    PrefixRoutingPolicy,
    batching_engine,
    combined_score,
    prefix_target,
    rank_with_prefix,
)

P = PrefixRoutingPolicy(prefix_weight=1.0, load_weight=0.05, max_extra_pending=4, prefill_tokens_per_s=200)


def test_without_prefixes_the_domain_order_stands():
    ranked = [("a", 0.9), ("b", 0.85), ("c", None)]
    assert rank_with_prefix(ranked, {}, {}, P) == ["a", "b", "c"]


def test_routing_prefers_the_holder():
    ranked = [("a", None), ("b", None), ("c", None)]  # ring owners, no domain
    assert rank_with_prefix(ranked, {"c": 512}, {}, P) == ["c", "a", "b"]
    # the longest prefix wins among holders
    assert rank_with_prefix(ranked, {"b": 256, "c": 1024}, {}, P)[0] == "c"


def test_a_holder_too_busy_is_not_promoted():
    ranked = [("a", None), ("b", None)]
    assert rank_with_prefix(ranked, {"b": 1024}, {"a": 0, "b": 5}, P) == ["a", "b"]
    assert rank_with_prefix(ranked, {"b": 1024}, {"a": 0, "b": 4}, P) == ["b", "a"]


def test_prefix_trades_against_domain_score_and_load():
    # a better adapter (0.2 points) outweighs 20 tokens (0.1 s) of saved prefill ...
    ranked = [("a", 0.9), ("b", 0.7)]
    assert rank_with_prefix(ranked, {"b": 20}, {}, P) == ["a", "b"]
    # ... but not a 1024-token prefix (5.1 s saved)
    assert rank_with_prefix(ranked, {"b": 1024}, {}, P) == ["b", "a"]
    assert combined_score(0.5, 200, 2, P) == 0.5 + 1.0 - 0.1
    assert combined_score(None, 0, 0, P) == P.fallback_score


def test_a_request_without_a_domain_goes_to_the_holder_of_a_longer_prefix():
    assert prefix_target("a", {"b": 512}, {}, frozenset(), P) == "b"
    assert prefix_target("a", {"a": 128, "b": 1024, "c": 512}, {}, frozenset(), P) == "b"


def test_it_stays_here_when_here_holds_as_much_or_the_gain_is_smaller_than_a_hop():
    assert prefix_target("a", {}, {}, frozenset(), P) is None
    assert prefix_target("a", {"a": 512, "b": 512}, {}, frozenset(), P) is None
    assert prefix_target("a", {"a": 512, "b": 530}, {}, frozenset(), P, min_gain_s=0.1) is None  # 0.09 s
    assert prefix_target("a", {"a": 512, "b": 540}, {}, frozenset(), P, min_gain_s=0.1) == "b"  # 0.14 s


def test_a_holder_that_is_down_or_too_busy_is_not_chosen():
    assert prefix_target("a", {"b": 1024}, {}, frozenset({"b"}), P) is None
    assert prefix_target("a", {"b": 1024}, {"a": 0, "b": 5}, frozenset(), P) is None
    assert prefix_target("a", {"b": 1024, "c": 1024}, {"a": 0, "b": 5, "c": 1}, frozenset(), P) == "c"


def test_every_shard_picks_the_same_holder_among_equals():
    held = {"b": 1024, "c": 1024}
    assert prefix_target("a", held, {}, frozenset(), P) == "b"
    assert prefix_target("d", held, {}, frozenset(), P) == "b"


class _View:
    def capabilities(self, domain):
        return ()

    def loads(self):
        return {"a": 0.0, "b": 0.0, "c": 1.0}


def _router(source):
    from types import SimpleNamespace

    from themis_shard.cluster.routing.prefix_routing import prefix_aware_router

    settings = SimpleNamespace(thresholds=(0.8, 0.6, 0.4), gamma=0.1)
    return prefix_aware_router(
        _View(), lambda key: ["a", "b", "c"], lambda: set(), settings, prefix_source=source
    )


def test_the_cluster_router_sends_a_prompt_to_the_holder_of_its_prefix():
    assert [d.shard_id for d in _router(None).rank("legal", "prompt")] == ["a", "b", "c"]
    assert next(d.shard_id for d in _router(lambda p: {"c": 512}).rank("legal", "prompt")) == "c"
    assert _router(lambda p: {"c": 512}).route("legal", "prompt").shard_id == "c"

    def broken(prompt):
        raise RuntimeError("directory down")

    assert _router(broken).route("legal", "prompt").shard_id == "a"  # routing never fails for it


HOST = ("shard-0", "shard-1", "shard-2")  # three engines sharing one machine's cores, by slot
B = PrefixRoutingPolicy(prefill_tokens_per_s=200, batch_weight=1.0, batch_room=4)


def test_a_request_landing_on_any_engine_of_a_shared_host_joins_the_first_ones_batch():
    assert batching_engine("shard-2", HOST, {}, frozenset(), room=4) == "shard-0"
    assert prefix_target("shard-2", {}, {}, frozenset(), B, colocated=HOST) == "shard-0"
    assert prefix_target("shard-1", {}, {"shard-0": 3}, frozenset(), B, colocated=HOST) == "shard-0"
    assert prefix_target("shard-0", {}, {"shard-0": 3}, frozenset(), B, colocated=HOST) is None  # it is here


def test_once_the_batch_is_full_the_next_engine_takes_the_overflow_and_then_each_keeps_its_own():
    full = {"shard-0": 4}
    assert batching_engine("shard-2", HOST, full, frozenset(), room=4) == "shard-1"
    assert prefix_target("shard-2", {}, full, frozenset(), B, colocated=HOST) == "shard-1"
    every = {"shard-0": 4, "shard-1": 4, "shard-2": 4}
    assert batching_engine("shard-2", HOST, every, frozenset(), room=4) is None
    assert prefix_target("shard-2", {}, every, frozenset(), B, colocated=HOST) is None


def test_an_engine_that_is_down_is_no_batching_engine():
    assert prefix_target("shard-2", {}, {}, frozenset({"shard-0"}), B, colocated=HOST) == "shard-1"
    # this shard is never down to itself
    assert batching_engine("shard-0", HOST, {}, frozenset({"shard-0"}), room=4) == "shard-0"


def test_a_prefix_that_saves_more_than_the_batch_is_worth_still_wins():
    held = {"shard-2": 1000}  # 5 s of prefill at 200 tokens/s, against a bonus of 1 point
    assert prefix_target("shard-1", held, {}, frozenset(), B, colocated=HOST) == "shard-2"
    assert prefix_target("shard-1", {"shard-2": 100}, {}, frozenset(), B, colocated=HOST) == "shard-0"


def test_shards_on_machines_of_their_own_share_no_batch():
    assert batching_engine("shard-2", ("shard-2",), {}, frozenset(), room=4) is None
    assert prefix_target("shard-2", {}, {}, frozenset(), B) is None
    assert prefix_target("shard-2", {}, {}, frozenset(), B, colocated=("shard-0", "shard-1")) is None
