"""Spec: the engine calls its speculator only through the seam ``llm/hooks.Speculator`` names, and
everything the engine is handed as a speculator — the shard's own and the speculative bench's
switch — implements all of it (a method the engine calls but an implementation lacks fails only
when a draft is first tried, as ``make bench-paper`` once did)."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

from themis_shard.llm import engine, hooks
from themis_shard.llm.speculative.speculator import Speculator

ROOT = Path(__file__).resolve().parents[2]


def seam() -> set[str]:
    return {name for name in vars(hooks.Speculator) if not name.startswith("_")}


def test_the_engine_calls_nothing_outside_the_seam() -> None:
    called = set(re.findall(r"self\._speculator\.(\w+)", Path(engine.__file__).read_text()))
    assert called and called <= seam()


def test_the_shards_speculator_implements_the_whole_seam() -> None:
    assert seam() <= set(dir(Speculator))


def test_the_speculative_benchs_switch_implements_the_whole_seam(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    bench = importlib.import_module("speculative")
    try:
        assert seam() <= set(dir(bench.Switch))
    finally:
        sys.modules.pop("speculative", None)
