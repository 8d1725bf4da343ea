"""Spec: the ``themis`` CLI shows progress during a real 3→4 scale and a real RAID rebuild
(captured with rich's recorder), and ``themis status --json`` is machine-readable."""

from __future__ import annotations

import io
import json
import os
import re

import pytest
from rich.console import Console
from themis_client import ThemisClient
from themis_shard.local_cluster import main

from .test_raid import wait_formed

pytestmark = pytest.mark.e2e


def recorder() -> Console:
    return Console(record=True, width=200, file=io.StringIO())


def test_up_then_scale_3_to_4_shows_startup_and_keys_moved(tmp_path, capsys) -> None:
    state = ["--state-dir", str(tmp_path / ".themis")]
    up = recorder()
    assert main([*state, "up", "--shards", "3", "--no-llm", "--base-port", "0",
                 "--data-root", str(tmp_path / "data")], console=up) == 0  # fmt: skip
    try:
        table = up.export_text()
        assert all(f"shard-{i}" in table for i in range(3)) and table.count("ready") >= 3
        urls = [line.split()[1] for line in capsys.readouterr().out.splitlines()]
        with ThemisClient(urls) as themis:
            for i in range(300):
                themis.put("books", f"b{i}", {"i": i})
        scale = recorder()
        assert main([*state, "scale", "--shards", "4"], console=scale) == 0
        out = scale.export_text()
        assert "scale 3→4 → ring v2" in out and "ETA" in out
        moved = re.search(r"(\d+)/(\d+) keys", out)
        assert moved and int(moved[1]) == int(moved[2]) > 0, out
        assert all(f"shard-{i}=purged" in out for i in range(4)), out
        capsys.readouterr()
        assert main([*state, "status", "--json"], console=recorder()) == 0
        status = json.loads(capsys.readouterr().out)
        assert status["running"] and [s["shard_id"] for s in status["shards"]] == [
            f"shard-{i}" for i in range(4)
        ]
        assert {s["status"] for s in status["shards"]} == {"ok"}
        with ThemisClient(urls[0]) as themis:
            assert all(themis.get("books", f"b{i}").document == {"i": i} for i in range(0, 300, 7))
    finally:
        main([*state, "down"], console=recorder())
    assert main([*state, "status", "--json"], console=recorder()) == 1


def test_raid_rebuild_shows_stripes_rebuilt_per_shard(local_cluster, tmp_path, monkeypatch, capsys) -> None:
    src = tmp_path / "weights-source.gguf"
    src.write_bytes(b"GGUF" + os.urandom(3_000_013))
    for key, value in {
        "THEMIS_RAID_ENABLED": "true",
        "THEMIS_RAID_SOURCE": str(src),
        "THEMIS_RAID_UNIT_SIZE": str(64 << 10),
        "THEMIS_RAID_STARTUP_TIMEOUT_S": "5",
    }.items():
        monkeypatch.setenv(key, value)
    cluster = local_cluster(3, raid_mode="raid5")
    wait_formed(cluster)
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    shards = [{"shard_id": s, "url": cluster.url(s), "pid": p.pid} for s, p in cluster.procs.items()]
    (state_dir / "cluster.json").write_text(
        json.dumps({"plan": str(cluster.plan_path), "ca": None, "shards": shards})
    )
    units = sorted((cluster.root / "shard-1" / "weights" / "units").rglob("*.*"))
    for path in units[::2]:
        path.unlink()
    console = recorder()
    assert (
        main(["--state-dir", str(state_dir), "raid", "rebuild", "--shard", "shard-1"], console=console) == 0
    )
    out = console.export_text()
    bar = re.search(r"shard-1 rebuild .*? (\d+)/(\d+) stripes", out)
    assert bar and bar[1] == bar[2] and int(bar[2]) > 0, out
    assert f"{len(units[::2])} unit(s) repaired" in capsys.readouterr().out
    state = ["--state-dir", str(state_dir), "raid"]
    assert main([*state, "verify", "--json", "--shard", "shard-1"], console=recorder()) == 0
    verified = json.loads(capsys.readouterr().out)
    assert verified["shard_id"] == "shard-1" and verified["missing"] == verified["corrupt"] == 0
    assert main([*state, "status", "--json"], console=recorder()) == 0
    assert {json.loads(line)["shard_id"] for line in capsys.readouterr().out.splitlines()} == set(cluster.ids)
