"""Model provisioning and fingerprints (pure parts; the real file is covered by the llm specs)."""

import hashlib
from pathlib import Path

import pytest
from themis_shard.llm.model import (
    ModelError,
    ModelFingerprint,
    fingerprint,
    quantisation_name,
    resolve_model_path,
)


def test_quantisation_names_come_from_the_gguf_file_type():
    assert quantisation_name("15") == "Q4_K_M"
    assert quantisation_name(7) == "Q8_0"
    assert quantisation_name(None) == "unknown"


def test_fingerprint_reads_metadata_and_hashes_the_bytes(tmp_path: Path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"not really weights")
    meta = {
        "general.architecture": "gemma3",
        "general.file_type": "15",
        "general.name": "tiny",
        "gemma3.block_count": "18",
        "gemma3.context_length": "32768",
    }
    fp = fingerprint(f, meta.get)
    assert (fp.architecture, fp.quantisation, fp.n_layers, fp.size_bytes) == ("gemma3", "Q4_K_M", 18, 18)
    assert fp.sha256 == hashlib.sha256(b"not really weights").hexdigest()
    other = ModelFingerprint(**{**fp.as_dict(), "name": "renamed"})
    assert fp.compatible_with(other)
    assert not fp.compatible_with(ModelFingerprint(**{**fp.as_dict(), "sha256": "0" * 64}))


def test_configured_paths_must_exist(tmp_path: Path):
    with pytest.raises(ModelError):
        resolve_model_path(str(tmp_path / "missing.gguf"))
    f = tmp_path / "x.gguf"
    f.write_bytes(b"x")
    assert resolve_model_path(str(f)) == f
