"""A started shard moves its start-up heap out of the garbage collector's sight and spaces out
young collections; a test process that builds apps is left as it is."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from types import SimpleNamespace

import httpx
from themis_shard.__main__ import when_started
from themis_shard.gc_policy import GcSettings, apply_after_start
from themis_testing.ports import free_port


class RecordingCollector:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.threshold = (700, 10, 10)

    def collect(self) -> int:
        self.calls.append("collect")
        return 0

    def freeze(self) -> None:
        self.calls.append("freeze")

    def get_freeze_count(self) -> int:
        return 123

    def get_threshold(self) -> tuple[int, int, int]:
        return self.threshold

    def set_threshold(self, threshold0: int, threshold1: int = 10, threshold2: int = 10) -> None:
        self.calls.append("set_threshold")
        self.threshold = (threshold0, threshold1, threshold2)


def test_garbage_is_collected_before_the_heap_is_frozen_so_nothing_unreachable_is_kept():
    collector = RecordingCollector()
    apply_after_start(GcSettings(), collector)
    assert collector.calls == ["collect", "freeze", "set_threshold"]


def test_young_collections_are_spaced_out_and_the_older_generations_keep_their_ratios():
    collector = RecordingCollector()
    apply_after_start(GcSettings(young_threshold=5_000), collector)
    assert collector.threshold == (5_000, 10, 10)


def test_freezing_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("THEMIS_GC_FREEZE_AFTER_START", "false")
    monkeypatch.setenv("THEMIS_GC_YOUNG_THRESHOLD", "700")
    collector = RecordingCollector()
    apply_after_start(GcSettings(), collector)
    assert collector.calls == ["set_threshold"]
    assert collector.threshold == (700, 10, 10)


def test_with_the_real_collector_the_heap_that_exists_is_frozen():
    code = (
        "import gc, json; from themis_shard.gc_policy import GcSettings, apply_after_start; "
        "apply_after_start(GcSettings()); print(json.dumps([gc.get_freeze_count(), gc.get_threshold()]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    frozen, threshold = json.loads(out)
    assert frozen > 1_000
    assert threshold[0] == GcSettings().young_threshold


def test_the_policy_waits_for_start_up_and_is_skipped_when_start_up_fails():
    async def scenario(starts: bool) -> list[str]:
        server = SimpleNamespace(started=False, should_exit=False)
        done: list[str] = []
        waiting = asyncio.create_task(when_started(server, lambda: done.append("applied")))
        await asyncio.sleep(0.1)
        assert done == []  # still starting
        if starts:
            server.started = True
        else:
            server.should_exit = True
        await asyncio.wait_for(waiting, 2)
        return done

    assert asyncio.run(scenario(starts=True)) == ["applied"]
    assert asyncio.run(scenario(starts=False)) == []


def test_a_shard_process_applies_it_once_it_serves(tmp_path):
    port = free_port()
    log = tmp_path / "shard.log"
    env = {
        "THEMIS_PORT": str(port),
        "THEMIS_DATA_DIR": str(tmp_path / "data"),
        "THEMIS_LLM_ENABLED": "false",
        "PATH": "/usr/bin:/bin",
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "themis_shard", "--log-level", "info"], env=env, stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + 60
        while "start-up objects frozen" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        assert httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5).status_code == 200
    finally:
        proc.kill()
        proc.wait()
