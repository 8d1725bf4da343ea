"""This machine's verify costs: measured once, remembered, and what the draft-length controller
makes of them (pure: no model; the engine's side is in test_speculative_llm.py)."""

from __future__ import annotations

import json

import pytest
from themis_shard.llm.speculative.adaptive import (
    AdaptiveConfig,
    CostModel,
    DraftLengthController,
    best_draft_length,
)
from themis_shard.llm.speculative.calibration import VerifyCostTable, measure_table, summarise
from themis_shard.llm.speculative.drafts import PromptLookup
from themis_shard.llm.speculative.speculator import Speculator

#: Gemma 3 270M on 2 threads of an AVX-512 Xeon, 1..9 logits rows: the output head is multiplied
#: by the rows in blocks of 4, so 4 rows cost little more than 3, and 8 less than 7.
BLOCKED = (0.0210, 0.0257, 0.0299, 0.0317, 0.0488, 0.0531, 0.0562, 0.0494, 0.0667)


class Timer:
    """A measure() that answers from a table and counts its calls (the shapes it was asked for)."""

    def __init__(self, table=BLOCKED, noise=()) -> None:
        self.table = table
        self.noise = list(noise)
        self.calls: list[int] = []

    def __call__(self, extra_rows: int) -> float:
        self.calls.append(extra_rows)
        return self.table[extra_rows] + (self.noise.pop(0) if self.noise else 0.0)


def test_each_shape_is_timed_untimed_once_then_in_passes_over_all_shapes():
    timer = Timer()
    measure_table(timer, 2, repeats=3)
    assert timer.calls == [0, 1, 2] + [0, 1, 2] * 3


def test_the_fastest_timing_of_each_shape_is_kept_and_none_is_below_a_plain_decode():
    assert summarise([[0.030, 0.021, 0.025], [0.026, 0.0261]]) == (0.021, 0.026)
    assert summarise([[0.021], [0.019]]) == (0.021, 0.021)  # noise: a verify is never cheaper
    assert summarise([[0.0212345]]) == (0.0212,)  # 0.1 ms: what is written is what is read


def test_a_spell_of_load_on_one_pass_does_not_reach_the_table():
    # the first timed pass over k = 0..2 ran beside another shard loading its model
    timer = Timer(noise=[0, 0, 0, 0.050, 0.050, 0.050])
    assert measure_table(timer, 2, repeats=3) == BLOCKED[:3]


def test_a_table_is_measured_once_per_key_and_read_back_after(tmp_path):
    first, second = Timer(), Timer(table=[t * 2 for t in BLOCKED])
    assert VerifyCostTable(tmp_path, "k1").get(first, 8) == BLOCKED
    assert VerifyCostTable(tmp_path, "k1").get(second, 8) == BLOCKED  # a later start reads it back
    assert second.calls == []
    assert VerifyCostTable(tmp_path, "k2").get(second, 8) != BLOCKED  # another machine/model/threads
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


@pytest.mark.parametrize(
    "content",
    ["not json", json.dumps({"seconds": [0.02, 0.03]}), json.dumps({"seconds": [0.02] * 8 + [-1]}), "{}"],
    ids=["garbage", "other-n_max", "negative", "empty"],
)
def test_a_table_that_does_not_fit_is_measured_again(tmp_path, content):
    (tmp_path / "verify-costs-k.json").write_text(content)
    timer = Timer()
    assert VerifyCostTable(tmp_path, "k").get(timer, 8) == BLOCKED
    assert timer.calls


def test_without_a_cache_directory_it_is_measured_on_every_start():
    timer = Timer()
    VerifyCostTable(None, "k").get(timer, 8)
    VerifyCostTable(None, "k").get(timer, 8)
    assert len(timer.calls) == 2 * 4 * 9


def test_a_cache_that_cannot_be_written_still_gives_the_measured_table(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # the cache directory's place is taken: nothing can be written there
    timer = Timer()
    assert VerifyCostTable(blocked / "cpu-probe", "k").get(timer, 8) == BLOCKED
    assert VerifyCostTable(blocked / "cpu-probe", "k").get(timer, 8) == BLOCKED  # measured again
    assert len(timer.calls) == 2 * 4 * 9


def test_the_model_prices_each_length_from_the_table():
    cost = CostModel.from_table(BLOCKED)
    assert cost.table(8) == pytest.approx(list(BLOCKED))
    assert cost.verify(7) < cost.verify(6)  # 8 rows fill two blocks: cheaper than 7


def test_a_quoting_answer_drafts_a_full_block_where_the_prior_line_drafted_one_token():
    alpha = 0.83  # prompt lookup on RAG answers, per draft token
    prior = best_draft_length(alpha, CostModel(), 8, min_gain=1.03)
    measured = best_draft_length(alpha, CostModel.from_table(BLOCKED), 8, min_gain=1.03)
    assert measured in (3, 7)  # the lengths that fill a block of logits rows
    assert measured > prior


def test_a_slow_start_ramps_to_the_lengths_that_fill_a_block():
    """Probes accepted in full grow 1, 2, 3, then the model judges: never 4, whose fifth row
    starts a block of its own."""
    ctl = DraftLengthController(AdaptiveConfig(n_max=8, recheck=2), CostModel.from_table(BLOCKED), alpha=0.2)
    ks = []
    for _ in range(12):
        k = ctl.choose(8)
        ks.append(k)
        ctl.observe(k, k)
    first = ks.index(1)
    assert ks[first : first + 3] == [1, 2, 3]
    assert 4 not in ks and set(ks[first + 3 :]) <= {3, 7}


def test_on_a_line_the_slow_start_still_doubles():
    assert [CostModel().efficient_length(m) for m in (2, 4, 8)] == [2, 4, 8]
    assert [CostModel.from_table(BLOCKED).efficient_length(m) for m in (2, 4, 6, 8)] == [2, 3, 3, 7]


def test_the_speculator_prices_rounds_by_the_table_it_was_calibrated_with(tmp_path):
    spec = Speculator(PromptLookup(), AdaptiveConfig(n_max=8), calibration=VerifyCostTable(tmp_path, "k"))
    spec.calibrate(Timer())

    class Seq:
        spec = None

    ctl = spec.state(Seq()).controller
    assert ctl.cost.table(8) == pytest.approx(list(BLOCKED))  # the fixed model of a deterministic source
    assert spec.cost.verify(3) == pytest.approx(BLOCKED[3])  # and the learnt one starts from it


def test_a_speculator_without_a_table_or_with_fixed_lengths_measures_nothing(tmp_path):
    timer = Timer()
    Speculator(PromptLookup(), AdaptiveConfig(n_max=8)).calibrate(timer)
    fixed = VerifyCostTable(tmp_path, "k")
    Speculator(PromptLookup(), AdaptiveConfig(n_max=8, adaptive=False), calibration=fixed).calibrate(timer)
    assert timer.calls == []


def test_a_failed_measurement_leaves_the_prior_in_place(tmp_path):
    def broken(extra_rows: int) -> float:
        raise RuntimeError("llama_decode returned 1")

    spec = Speculator(PromptLookup(), AdaptiveConfig(n_max=8), calibration=VerifyCostTable(tmp_path, "k"))
    spec.calibrate(broken)
    assert spec.cost.table(8) == pytest.approx(CostModel().table(8))
