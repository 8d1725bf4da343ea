"""`themis up` start-up: a shard that dies before it is ready is named in one line, with its cause
and its log file, then the end of its log.

The shard's own start-up errors name their cause (say, a llama.cpp build needing AVX-512 on an
AVX2 host), so the user sees that instead of "see the logs".
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from themis_shard.local_cluster import wait_ready


def test_a_shard_that_exits_during_start_up_is_named_with_its_last_log_lines(tmp_path):
    log = tmp_path / "shard-1.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "print('UnsupportedCPU: this build needs AVX512 (avx512f)'); raise SystemExit(1)",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    proc.wait(30)
    with pytest.raises(SystemExit) as failed:
        wait_ready(["http://127.0.0.1:9"], 30, [proc.pid], logs=[str(log)], shard_ids=["shard-1"])
    first, *tail = str(failed.value).splitlines()
    assert first == (
        f"shard-1 exited during start-up: UnsupportedCPU: this build needs AVX512 (avx512f) (log: {log})"
    )
    assert tail, "the end of the log follows"


def test_the_cause_is_the_error_line_not_uvicorns_epilogue():
    from themis_shard.local_cluster import start_failure_cause

    log = (
        "INFO: Waiting for application startup.\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "FileExistsError: /c/model.gguf already exists with an unexpected sha256\n"
        "ERROR:    Application startup failed. Exiting.\n"
    )
    cause = "FileExistsError: /c/model.gguf already exists with an unexpected sha256"
    assert start_failure_cause(log) == cause
    assert start_failure_cause("") == "it exited without writing to its log"
    assert start_failure_cause("loading\nKilled\n") == "Killed"


def test_up_restarts_only_the_shards_whose_process_is_gone() -> None:
    from themis_shard.local_cluster import missing_shards

    shards = [{"shard_id": "shard-0", "pid": 10}, {"shard_id": "shard-1", "pid": 11}]
    assert missing_shards(shards, lambda pid: pid != 11) == ["shard-1"]
    assert missing_shards(shards, lambda pid: True) == []


@pytest.mark.parametrize(
    ("cores", "engines", "threads"), [(2, 3, 1), (2, 1, 2), (16, 3, 5), (16, 4, 4), (1, 1, 1)]
)
def test_model_copies_on_one_host_share_its_cores_instead_of_each_taking_all(cores, engines, threads):
    from themis_shard.local_cluster import engine_threads

    assert engine_threads(cores, engines) == threads


def test_a_shard_gets_its_share_of_the_cores_unless_the_user_set_the_thread_count(tmp_path, monkeypatch):
    monkeypatch.delenv("THEMIS_LLM_HOST_CORES_FILE", raising=False)
    from themis_core.plan import Member
    from themis_shard import local_cluster

    seen: list[dict] = []

    class Recorder:
        def __init__(self, argv, env, **kw):
            seen.append(env)
            self.pid = 4242

    monkeypatch.setattr(local_cluster.subprocess, "Popen", Recorder)
    (tmp_path / "logs").mkdir()
    shared = tmp_path / "host-cores"
    launch = {
        "data_root": str(tmp_path),
        "host": "127.0.0.1",
        "gossip_secret": "s",
        "no_llm": False,
        "llm_threads": 1,
        "host_cores": 2,
        "host_cores_file": str(shared),
    }
    member = Member(shard_id="shard-0", url="http://127.0.0.1:9")
    monkeypatch.delenv("THEMIS_LLM_N_THREADS", raising=False)
    local_cluster.start_shard(tmp_path, tmp_path / "plan.json", launch, member, {})
    monkeypatch.setenv("THEMIS_LLM_N_THREADS", "7")
    local_cluster.start_shard(tmp_path, tmp_path / "plan.json", launch, member, {})
    assert seen[0]["THEMIS_LLM_N_THREADS"] == "1" and seen[1]["THEMIS_LLM_N_THREADS"] == "7"
    # by demand, through the host's shared slots (made if missing); a fixed count shares nothing
    assert seen[0]["THEMIS_LLM_HOST_CORES"] == "2" and seen[0]["THEMIS_LLM_HOST_CORES_FILE"] == str(shared)
    assert shared.stat().st_size > 0
    assert "THEMIS_LLM_HOST_CORES_FILE" not in seen[1]
