"""The record of loaded trained adapters (``<weights>/trained/loaded.json``): what a restarted
shard reloads, what it skips, and a record from a newer Themis that it refuses by name."""

from __future__ import annotations

import asyncio
import json

import pytest
from themis_core.data_format import FormatTooNew
from themis_shard.training.persisted import FORMAT, TrainedAdapters


class Loads:
    """Records the loads asked of it (the AdapterManager seam); ``bad`` names fail to load."""

    def __init__(self, bad=()) -> None:
        self.calls: list[tuple[str, str, str | None]] = []
        self.bad = set(bad)

    async def load(self, name, path, *, domain, evaluate=None):
        if name in self.bad:
            raise ValueError("llama.cpp rejected it")
        self.calls.append((name, path, domain))


def test_recorded_adapters_with_files_are_reloaded_with_their_domain(tmp_path):
    t = TrainedAdapters(tmp_path)
    for name in ("legal-ft", "code-ft", "gone"):
        t.record(name, name.split("-")[0])
    (tmp_path / "legal-ft.gguf").write_bytes(b"x")
    (tmp_path / "code-ft.gguf").write_bytes(b"x")
    loads = Loads()
    assert asyncio.run(t.reload(loads)) == ["code-ft", "legal-ft"]
    assert loads.calls == [
        ("code-ft", str(tmp_path / "code-ft.gguf"), "code"),
        ("legal-ft", str(tmp_path / "legal-ft.gguf"), "legal"),
    ]


def test_an_adapter_that_fails_to_load_is_skipped_and_the_others_still_load(tmp_path):
    t = TrainedAdapters(tmp_path)
    for name in ("a", "b"):
        t.record(name, None)
        (tmp_path / f"{name}.gguf").write_bytes(b"x")
    assert asyncio.run(t.reload(Loads(bad={"a"}))) == ["b"]


def test_forgotten_adapters_are_not_reloaded_and_the_record_carries_its_format(tmp_path):
    t = TrainedAdapters(tmp_path)
    t.record("a", "legal")
    t.record("b", None)
    t.forget("a")
    t.forget("never-recorded")
    assert t.entries() == {"b": None}
    assert json.loads((tmp_path / "loaded.json").read_text()) == {"format": FORMAT, "adapters": {"b": None}}


def test_a_record_written_by_a_newer_themis_is_refused_with_the_versions(tmp_path):
    (tmp_path / "loaded.json").write_text(json.dumps({"format": FORMAT + 1, "adapters": {}}))
    with pytest.raises(
        FormatTooNew, match=f"format {FORMAT + 1}, but this Themis reads formats up to {FORMAT}"
    ):
        TrainedAdapters(tmp_path).entries()
