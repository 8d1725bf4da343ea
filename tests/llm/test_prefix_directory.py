"""Cluster prefix directory and the pull-or-prefill break-even (pure)."""

from __future__ import annotations

from themis_shard.cluster.routing.prefix_directory import PrefixDirectory, pull_pays

H = [f"{i:032x}" for i in range(1, 6)]  # hashes of the 1..5-block prefixes of one prompt


def test_longest_held_prefix_wins_then_fewest_bytes():
    d = PrefixDirectory()
    d.update("a", [{"hash": H[1], "n_tokens": 128, "bytes": 10}], now=0)
    d.update("b", [{"hash": H[3], "n_tokens": 256, "bytes": 30}], now=0)
    d.update("c", [{"hash": H[3], "n_tokens": 256, "bytes": 20}], now=0)
    assert [p for p, _, _ in d.holders(H, now=1)] == ["c", "b"]
    assert d.holders(H[:3], now=1)[0][0] == "a"
    assert d.holders(H, now=1, exclude="c")[0][0] == "b"


def test_listings_are_bounded_validated_and_age_out():
    d = PrefixDirectory(max_per_peer=2, ttl_s=10)
    d.update("a", [{"hash": h, "n_tokens": 64} for h in H] + [{"hash": "x"}, {"nope": 1}], now=0)
    assert d.size() == 2
    d.update("b", [{"hash": "short", "n_tokens": 64}, {"hash": H[4], "n_tokens": -1}], now=0)
    assert not d.holds("b", H[4])
    assert d.holders(H[:2], now=5) and not d.holders(H[:2], now=11)
    d.forget("a")
    assert d.size() == 0


def test_break_even_pull_vs_prefill():
    kw = dict(prefill_tokens_per_s=180.0, net_bytes_per_s=100e6, load_bytes_per_s=800e6, rtt_s=0.005)
    # 1024 tokens ≈ 11 MB: prefill ≈ 5.7 s vs pull ≈ 0.13 s
    assert pull_pays(1024, 11_000_000, **kw)
    # a slow link: 1 MB/s → 11 s > 5.7 s
    assert not pull_pays(1024, 11_000_000, **{**kw, "net_bytes_per_s": 1e6})
    # nothing saved, nothing to pull
    assert not pull_pays(0, 1, **kw)
    # exactly at break-even it does not pay (strict)
    t = 64 / 180.0
    assert not pull_pays(64, int((t - 0.005) / (1 / 100e6 + 1 / 800e6)) + 1, **kw)
