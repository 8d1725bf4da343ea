"""Spec: `make gpu-check DRY=1` runs every step of the GPU check on the CPU and prints one table.

The dry run is the GPU check's own code with the CPU stand-ins (a device copier whose copies
refuse removal like FAISS GPU indexes, numpy as the array module, resident memory as "device
memory"), at tiny sizes, against the real shard and model: if a step's plumbing breaks, this fails
before anyone gets a GPU to find out. Its numbers are not measurements and are not asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.llm

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dry_run() -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return done.returncode, done.stdout


def table_rows(stdout: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in stdout.splitlines()
        if line.startswith("| ")
    ]


def test_the_dry_run_passes_and_says_so_on_its_last_line(dry_run) -> None:
    code, out = dry_run
    assert code == 0, out
    assert json.loads(out.strip().splitlines()[-1])["ok"] is True


def test_every_step_contributes_rows_to_the_one_table(dry_run) -> None:
    steps = {row[0] for row in table_rows(dry_run[1])[1:]}
    assert steps == {"engine", "vectors", "parity", "vram"}


def test_the_engine_is_measured_at_each_client_level(dry_run) -> None:
    measures = [row[1] for row in table_rows(dry_run[1]) if row[0] == "engine"]
    assert any(m.endswith("clients tok/s") for m in measures)
    assert any("TTFT p99" in m for m in measures)


def test_deleted_vectors_never_come_back_and_parity_bytes_match(dry_run) -> None:
    rows = table_rows(dry_run[1])
    deleted = [r for r in rows if r[1].endswith("deleted keys returned")]
    assert deleted and all(r[2] == "0" for r in deleted)
    identical = [r for r in rows if r[1].endswith("bit-identical to the CPU")]
    assert len(identical) == 2 and all(r[2] == "yes" for r in identical)


def test_the_vram_step_splits_weights_kv_and_the_index_and_drives_preemption(dry_run) -> None:
    measures = {
        r[1].split(" ")[0] + " " + r[1].split(" ")[1]: r for r in table_rows(dry_run[1]) if r[0] == "vram"
    }
    assert {"weights (host", "KV cache", "vector index"} <= set(measures)
    preempt = next(r for r in table_rows(dry_run[1]) if r[1].endswith("preemptions"))
    assert int(preempt[2]) > 0, "the dry run's KV pool is sized so that its clients must preempt"
