"""Spec: a first-use artifact (the assembled model, the converted embedding GGUF) is built once per
cache, however many processes ask at the same moment, and a damaged or half-written one is
rebuilt, never served."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from themis_shard.llm.artifacts import ArtifactError, CacheSettings, cache_root, materialise

PAYLOAD = b"gguf" * 50_000
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


def _slow_build(log: Path):
    def build(out: Path) -> None:
        with log.open("a") as fh:
            fh.write(f"{os.getpid()}\n")
        with out.open("wb") as fh:  # written in pieces, slowly: a reader must never see half
            for i in range(0, len(PAYLOAD), 40_000):
                fh.write(PAYLOAD[i : i + 40_000])
                fh.flush()
                time.sleep(0.05)

    return build


# A process of its own (not a fork of pytest), as each shard is.
ASK = """
import hashlib, os, sys, time
from pathlib import Path
from themis_shard.llm.artifacts import materialise
payload = b"gguf" * 50_000
target, log, expected = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] or None
def build(out):
    with log.open("a") as fh:
        fh.write(f"{os.getpid()}\\n")
    with out.open("wb") as fh:
        for i in range(0, len(payload), 40_000):
            fh.write(payload[i : i + 40_000]); fh.flush(); time.sleep(0.05)
path = materialise(target, build, what="test artifact", expected_sha256=expected)
print(hashlib.sha256(path.read_bytes()).hexdigest())
"""


@pytest.mark.parametrize("expected", [PAYLOAD_SHA, None], ids=["known digest", "recorded digest"])
def test_processes_asking_at_once_build_it_once_and_all_get_the_whole_file(tmp_path, expected):
    target, log = tmp_path / "cache" / "model.gguf", tmp_path / "builds.log"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ASK, str(target), str(log), expected or ""],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    digests = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0] * 4
    assert digests == [PAYLOAD_SHA] * 4
    assert len(log.read_text().split()) == 1, "exactly one process built it"
    names = sorted(p.name for p in target.parent.iterdir())
    assert names == ["model.gguf", "model.gguf.lock", "model.gguf.sha256"], "no temporary file is left"


def test_a_file_with_the_wrong_digest_is_rebuilt_not_served(tmp_path):
    target, log = tmp_path / "model.gguf", tmp_path / "builds.log"
    target.write_bytes(PAYLOAD[: len(PAYLOAD) // 2])  # what a killed in-place writer leaves
    path = materialise(target, _slow_build(log), what="test artifact", expected_sha256=PAYLOAD_SHA)
    assert path.read_bytes() == PAYLOAD and log.exists()


def test_a_file_whose_recorded_digest_does_not_match_is_rebuilt(tmp_path):
    target, log = tmp_path / "emb.gguf", tmp_path / "builds.log"
    materialise(target, _slow_build(log), what="test artifact")
    target.write_bytes(b"corrupted")
    assert materialise(target, _slow_build(log), what="test artifact").read_bytes() == PAYLOAD
    assert len(log.read_text().split()) == 2


def test_a_file_without_a_recorded_digest_is_not_trusted(tmp_path):
    target, log = tmp_path / "emb.gguf", tmp_path / "builds.log"
    target.write_bytes(PAYLOAD)  # left by an older release, or by a writer killed before recording
    materialise(target, _slow_build(log), what="test artifact")
    assert log.exists() and (tmp_path / "emb.gguf.sha256").read_text().strip() == PAYLOAD_SHA


HOLD = """
import sys, time
from pathlib import Path
from themis_shard.llm.artifacts import exclusive
with exclusive(Path(sys.argv[1]), "a build that is killed"):
    Path(sys.argv[1] + ".held").touch()
    time.sleep(600)
"""


def test_a_writer_killed_mid_build_releases_the_lock_and_leaves_nothing_that_is_served(tmp_path):
    target, log = tmp_path / "model.gguf", tmp_path / "builds.log"
    lock = str(target) + ".lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, lock])
    deadline = time.monotonic() + 30
    while not Path(lock + ".held").exists():
        assert time.monotonic() < deadline and holder.poll() is None
        time.sleep(0.05)
    (tmp_path / f".model.gguf.{holder.pid}.tmp").write_bytes(PAYLOAD[:1000])  # its half-written file
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(10)
    path = materialise(target, _slow_build(log), what="test artifact", expected_sha256=PAYLOAD_SHA)
    assert path.read_bytes() == PAYLOAD


def test_a_build_that_yields_the_wrong_bytes_fails_by_name_and_leaves_no_file(tmp_path):
    target = tmp_path / "model.gguf"
    with pytest.raises(ArtifactError, match=r"test artifact built at .* has sha256"):
        materialise(
            target, lambda out: out.write_bytes(b"nope"), what="test artifact", expected_sha256=PAYLOAD_SHA
        )
    assert not target.exists() and not list(tmp_path.glob(".*.tmp"))


def test_the_cache_root_is_a_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("THEMIS_CACHE_DIR", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.delenv("THEMIS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "themis"
    assert cache_root(CacheSettings(cache_dir="~/x")) == Path.home() / "x"
