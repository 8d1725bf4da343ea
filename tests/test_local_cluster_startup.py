"""`themis up` start-up: a shard that dies before it is ready is named, with the end of its log.

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
        wait_ready(["http://127.0.0.1:9"], 30, [proc.pid], logs=[str(log)])
    message = str(failed.value)
    assert "exited during start-up (http://127.0.0.1:9)" in message
    assert str(log) in message and "AVX512 (avx512f)" in message


def test_up_restarts_only_the_shards_whose_process_is_gone() -> None:
    from themis_shard.local_cluster import missing_shards

    shards = [{"shard_id": "shard-0", "pid": 10}, {"shard_id": "shard-1", "pid": 11}]
    assert missing_shards(shards, lambda pid: pid != 11) == ["shard-1"]
    assert missing_shards(shards, lambda pid: True) == []
