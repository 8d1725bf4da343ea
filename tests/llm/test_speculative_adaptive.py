"""Adaptive draft length and prompt-lookup drafts (pure: no model)."""

from __future__ import annotations

import pytest
from themis_shard.llm.speculative.adaptive import (
    AdaptiveConfig,
    CostModel,
    DraftLengthController,
    best_draft_length,
    expected_tokens,
)
from themis_shard.llm.speculative.drafts import PromptLookup, lookup


def test_expected_tokens_geometric():
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 5) == 6.0
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_tokens(0.9, 0) == 1.0


def test_cost_model_learns_linear_verify_cost():
    cost = CostModel(base_s=0.05, row_s=0.05)  # a wrong prior
    for _ in range(200):
        for k in (0, 0, 0, 2, 4, 8):
            cost.observe(k, 0.020 + 0.007 * k)
    assert cost.base == pytest.approx(0.020, rel=0.05)
    assert cost.row == pytest.approx(0.007, rel=0.05)


def test_best_length_grows_with_acceptance_and_is_zero_when_it_cannot_pay():
    cost = CostModel(base_s=0.027, row_s=0.0115)  # ARCHITECTURE §3: 9-token verify ≈ 4.4× decode
    ks = [best_draft_length(a, cost, 8, min_gain=1.03) for a in (0.1, 0.3, 0.6, 0.8, 0.95)]
    assert ks[0] == 0 and ks[1] == 0
    assert ks == sorted(ks) and ks[-1] >= 4
    # the §3 measurement: a 15-of-18-layer draft (accepted 96 %) whose per-token cost is ~0.8 of a
    # target decode cannot beat plain decoding on this CPU
    assert best_draft_length(0.96, cost, 8, draft_per_token_s=0.8 * 0.027, min_gain=1.03) == 0
    # a slow remote round trip disables speculation
    assert best_draft_length(0.9, cost, 8, draft_fixed_s=0.5) == 0


def test_controller_falls_back_on_low_acceptance_then_probes():
    cfg = AdaptiveConfig(n_max=8, adaptive=False, cooldown=5, recheck=4, probe=1, min_trials=4)
    ctl = DraftLengthController(cfg, CostModel())
    reasons = []
    for _ in range(10):
        k = ctl.choose(8)
        if k:
            r = ctl.observe(k, 0)
            if r:
                reasons.append(r)
                break
    assert reasons == ["low_acceptance"]
    ks = [ctl.choose(8) for _ in range(5)]
    assert ks == [0, 0, 0, 0, 1]  # cooldown, then a one-token probe


def test_controller_fixed_mode_and_limits():
    ctl = DraftLengthController(AdaptiveConfig(n_max=8, adaptive=False), CostModel())
    assert ctl.choose(100) == 8
    assert ctl.choose(3) == 3
    assert ctl.choose(0) == 0


def test_slow_draft_source_pauses():
    ctl = DraftLengthController(AdaptiveConfig(max_draft_s=0.1, cooldown=3), CostModel())
    assert ctl.observe_draft_cost(4, 0.5) == "slow_draft"
    assert ctl.choose(8) == 0


def test_high_acceptance_keeps_long_drafts():
    ctl = DraftLengthController(AdaptiveConfig(n_max=8), CostModel(base_s=0.027, row_s=0.007))
    for _ in range(30):
        k = ctl.choose(8)
        ctl.observe(k, k)
    assert ctl.alpha > 0.9 and ctl.choose(8) >= 5


def test_prompt_lookup_finds_most_recent_longest_match():
    ctx = [1, 2, 3, 4, 5, 9, 9, 1, 2, 3, 7, 8, 0, 2, 3]
    # last 2-gram (2, 3) occurred at 8..9 (followed by 7, 8) and 1..2 (followed by 4, 5)
    assert lookup(ctx, 3, min_ngram=2, max_ngram=2) == [7, 8, 0]
    # a 3-gram (0, 2, 3) has no earlier occurrence, so it falls back to the 2-gram
    assert lookup(ctx, 2, min_ngram=2, max_ngram=3) == [7, 8]
    assert lookup([1, 2, 3], 4) == []
    assert lookup(ctx, 0) == []
    d = PromptLookup(2, 4).propose(None, ctx, 2)
    assert d.tokens == [7, 8] and [q.prob(t) for q, t in zip(d.q, d.tokens, strict=True)] == [1.0, 1.0]


def test_prompt_lookup_continuation_stops_at_context_end():
    assert lookup([5, 6, 5, 6], 8, min_ngram=2) == [5, 6]


def test_adaptive_controller_stops_drafting_when_drafts_are_always_wrong():
    """Adaptive mode reaches n_draft = 0 by itself (before the hard fallback) and then probes
    with one token, backing off exponentially: the waste over 1000 rounds is a handful of rows."""
    cfg = AdaptiveConfig(n_max=8)
    ctl = DraftLengthController(cfg, CostModel())
    drafted = 0
    for _ in range(1000):
        k = ctl.choose(8)
        ctl.observe(k, 0)
        drafted += k
    assert drafted <= 12
    assert ctl.backoff == cfg.max_backoff


def test_successful_probe_resumes_speculation():
    cfg = AdaptiveConfig(n_max=8, recheck=4)
    ctl = DraftLengthController(cfg, CostModel(), alpha=0.1)
    assert ctl.choose(8) == 0
    ks = [ctl.choose(8) for _ in range(4)]
    assert ks == [0, 0, 0, 1]
    for _ in range(20):  # the text turned into a quote: every draft token hits
        ctl.observe(max(ks[-1], 1), max(ks[-1], 1))
        ks.append(ctl.choose(8))
    assert ks[-1] >= 3


def test_per_position_acceptance_values_bursty_drafts():
    # first token accepted 70 %, every later one 98 % given the previous: long drafts pay
    bursty = [0.7] + [0.98] * 7
    assert expected_tokens(bursty, 1) == pytest.approx(1.7)
    cost = CostModel(base_s=0.026, row_s=0.0113)
    assert best_draft_length(bursty, cost, 8) == 8
    assert best_draft_length(0.88, cost, 8) < 8  # the geometric model with the same mean would stop early


def test_a_fully_accepted_probe_doubles_until_the_model_has_seen_long_drafts():
    """Slow start: probes of 1, 2, 4, 8 tokens while each is accepted in full; afterwards the
    model knows later positions hit too and keeps drafting long (a quote began)."""
    cfg = AdaptiveConfig(n_max=8, recheck=2)
    ctl = DraftLengthController(cfg, CostModel(base_s=0.024, row_s=0.015), alpha=0.2)
    ks = []
    for _ in range(12):
        k = ctl.choose(8)
        ks.append(k)
        ctl.observe(k, k)  # every draft token hits
    first = ks.index(1)
    assert ks[first : first + 4] == [1, 2, 4, 8]
    assert min(ks[first + 4 :]) >= 6


def test_a_failed_step_of_the_ramp_ends_it():
    ctl = DraftLengthController(AdaptiveConfig(n_max=8, recheck=2), CostModel(), alpha=0.1)
    ks = [ctl.choose(8) for _ in range(3)]
    assert ks[-1] == 1
    ctl.observe(1, 1)
    assert ctl.choose(8) == 2
    ctl.observe(2, 0)  # rejected: no 4-token probe follows
    assert ctl.choose(8) != 4


def test_earlier_requests_without_quotes_do_not_switch_prompt_lookup_off_for_new_ones():
    from themis_shard.llm.speculative.speculator import Speculator

    class Seq:
        spec = None

    spec = Speculator(PromptLookup(2, 4), AdaptiveConfig(n_max=8))
    for _ in range(50):  # earlier sequences: nothing to copy
        spec.shared.observe(8, 0)
    assert spec.shared.predicts_no_gain()
    fresh = spec.state(Seq()).controller
    assert fresh.cooldown < AdaptiveConfig().max_backoff  # a free source starts fresh

    class RoundTrip(PromptLookup):  # drafts from elsewhere: timed, and what it costs is learnt
        deterministic = False

    costly = Speculator(RoundTrip(2, 4), AdaptiveConfig(n_max=8))
    costly.shared.draft_fixed_s = 0.05  # a round trip of two decodes
    for _ in range(50):
        costly.shared.observe(8, 0)
    assert costly.state(Seq()).controller.cooldown == AdaptiveConfig().max_backoff


def test_cost_model_measures_each_draft_length_it_has_seen():
    """The measured curve on this CPU (ms by extra rows): a line through it would price 8 rows
    at ~130 ms instead of 94 and make long drafts look unprofitable."""
    curve = {0: 0.0168, 1: 0.0302, 2: 0.0504, 4: 0.0655, 8: 0.0937}
    cost = CostModel()
    for _ in range(50):
        for k, t in curve.items():
            cost.observe(k, t)
    for k, t in curve.items():
        assert cost.verify(k) == pytest.approx(t, rel=1e-3)
    assert curve[1] < cost.verify(3) < curve[8]  # unseen lengths: the fitted line
    # repetitive text: 8 drafted, ~6 accepted per round pays against plain (7 tokens / 94 ms)
    assert best_draft_length([0.9] + [0.97] * 7, cost, 8, min_gain=1.03) == 8


def test_a_draft_model_that_cannot_pay_is_neither_probed_nor_ramped_up():
    ctl = DraftLengthController(AdaptiveConfig(n_max=8, recheck=2), CostModel(base_s=0.024, row_s=0.012))
    ctl.draft_per_token_s = 0.9 * 0.024  # each draft token almost a target decode
    ks = []
    for _ in range(12):
        k = ctl.choose(8)
        ks.append(k)
        ctl.observe(k, k)  # even if every probe were accepted
    assert max(ks) == 0


def test_a_draft_models_size_sets_its_cost_before_it_was_ever_timed():
    """A 0.95-size draft (15/18 layers keep the 262k-row head) is judged unprofitable from its
    size alone: no sequence probes it, so none pays a draft-side prefill of its prompt."""
    from themis_shard.llm.speculative.speculator import Speculator

    class SizedDraft(PromptLookup):
        name = "local"
        per_token_cost = True
        deterministic = False

        def expected_token_s(self, target_decode_s, target_bytes):
            return target_decode_s * 0.95

    class Seq:
        spec = None

    spec = Speculator(SizedDraft(), AdaptiveConfig(n_max=8), cost=CostModel(base_s=0.024, row_s=0.012))
    ctl = spec.state(Seq()).controller
    assert ctl.per_token_s == pytest.approx(0.95 * 0.024)
    assert [ctl.choose(8) for _ in range(300)] == [0] * 300
    free = Speculator(PromptLookup(), AdaptiveConfig(n_max=8)).state(Seq()).controller
    assert free.per_token_s == 0.0 and free.choose(8) > 0


def test_prompt_lookup_chooses_draft_lengths_from_its_own_sequence_alone():
    """Draft lengths change the verify batch's shape, and with it the logits' last bits: for a
    reproducible answer, a deterministic source's choices depend on nothing but the sequence
    (not on earlier sequences, not on the engine's timings)."""
    from themis_shard.llm.speculative.speculator import Speculator

    class Seq:
        spec = None

    def lengths(spec: Speculator) -> list[int]:
        seq, out = Seq(), []
        for accepted in (1, 2, 0, 4, 4, 0, 1):
            out.append(k := spec.state(seq).controller.choose(8))
            spec.state(seq).controller.observe(k, min(k, accepted))
        return out

    quiet = Speculator(PromptLookup(2, 4), AdaptiveConfig(n_max=8))
    busy = Speculator(PromptLookup(2, 4), AdaptiveConfig(n_max=8))
    for _ in range(40):  # a history of other sequences and timings that a learner would follow
        busy.shared.observe(8, 0)
        busy.observe_iteration(0.5, 8)
    assert lengths(quiet) == lengths(busy)


def test_speculation_stops_while_the_batch_already_fills_the_cores():
    from themis_shard.llm.speculative.speculator import Speculator

    capped = Speculator(PromptLookup(), AdaptiveConfig(max_batch=2))
    assert capped.drafts_at(1) and capped.drafts_at(2) and not capped.drafts_at(3)
    assert Speculator(PromptLookup(), AdaptiveConfig()).drafts_at(64)  # 0: no cap
