"""The start-up CPU probe: extra buffer types (weight repacking) only where a decode survives them.

Spec:
* the decision is a pure function of the setting, the GPU layers and the probe's outcome; it never
  changes the GPU layers (a GPU machine keeps full offload whatever the CPU probe says);
* a build compiled for features the CPU lacks is refused by name before anything runs;
* a probe child that dies by a signal makes the model load without extra buffer types, and the
  shard then serves exactly the greedy text of plain llama.cpp, with the fallback in /health and
  /metrics (forced here with the ``probe_fault`` drill, since this CPU may well not trap AMX).
"""

from __future__ import annotations

import importlib.util
import signal
from pathlib import Path

import httpx
import pytest
from themis_shard.llm.cpu_probe import (
    BufferPolicy,
    ProbeResult,
    UnsupportedCPU,
    build_features,
    cpu_flags,
    cpu_model,
    decide,
    missing_features,
)

ROOT = Path(__file__).resolve().parents[2]
SEGV = ProbeResult(-int(signal.SIGSEGV))
OK = ProbeResult(0)

SYSTEM_INFO = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | "
    "AMX_INT8 = 0 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
)


# ---- pure parts ---------------------------------------------------------------------------------
def test_build_features_are_the_compiled_in_ones():
    feats = build_features(SYSTEM_INFO)
    assert {"AVX2", "AVX512", "FMA", "REPACK"} <= feats
    assert "AMX_INT8" not in feats


def test_a_build_needing_avx512_on_an_avx2_cpu_names_what_is_missing():
    avx2_only = cpu_flags("processor: 0\nflags\t\t: fpu sse pni ssse3 avx avx2 f16c fma bmi2\n")
    assert missing_features(build_features(SYSTEM_INFO), avx2_only) == ["AVX512"]
    zen4 = avx2_only | {"avx512f"}
    assert missing_features(build_features(SYSTEM_INFO), zen4) == []
    assert missing_features(build_features(SYSTEM_INFO), frozenset()) == []  # no cpuinfo: no verdict


def test_the_cpu_model_is_read_from_cpuinfo():
    info = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C CPU\n"
    assert cpu_model(info) == "Intel(R) Xeon(R) Platinum 8481C CPU"
    assert cpu_model("processor: 0\n") == ""  # some kernels (arm64) give none


@pytest.mark.parametrize("gpu_layers", [0, 12, 999])
@pytest.mark.parametrize("mode", ["auto", "on", "off"])
@pytest.mark.parametrize("probe", [None, OK, SEGV, ProbeResult(-int(signal.SIGILL)), ProbeResult(3)])
def test_the_decision_never_touches_gpu_offload(mode, gpu_layers, probe):
    assert decide(mode, gpu_layers, probe).n_gpu_layers == gpu_layers


def test_auto_keeps_repacking_when_the_probe_survives_and_drops_it_when_it_dies():
    kept = decide("auto", 0, OK)
    assert kept.use_extra_bufts and not kept.fallback
    dropped = decide("auto", 0, SEGV)
    assert not dropped.use_extra_bufts and dropped.fallback
    assert "SIGSEGV" in dropped.reason and "repacking is off" in dropped.reason


def test_settings_override_the_probe():
    assert decide("on", 0, SEGV).use_extra_bufts is True
    assert decide("off", 0, OK).use_extra_bufts is False
    assert not decide("off", 0, OK).fallback


def test_probe_results_describe_how_the_child_ended():
    assert OK.ok and OK.describe() == "ok"
    assert SEGV.signal_name == "SIGSEGV" and SEGV.describe() == "died with SIGSEGV"
    assert ProbeResult(3, "forward pass returned 1").describe() == "exited with 3: forward pass returned 1"


def test_native_wheels_are_keyed_by_cpu_so_a_cached_build_never_reaches_another_cpu():
    spec = importlib.util.spec_from_file_location("llama_wheel", ROOT / "tools" / "llama_wheel.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    epyc = "model name\t: AMD EPYC\nflags\t\t: avx avx2 fma\n"
    xeon = "model name\t: Intel Xeon\nflags\t\t: avx avx2 fma avx512f amx_tile amx_int8\n"
    assert tool.cpu_key(epyc, tool.CMAKE_ARGS) == tool.cpu_key(epyc, tool.CMAKE_ARGS)
    assert tool.cpu_key(epyc, tool.CMAKE_ARGS) != tool.cpu_key(xeon, tool.CMAKE_ARGS)
    assert tool.cpu_key(epyc, tool.CMAKE_ARGS) != tool.cpu_key(epyc, "-DGGML_NATIVE=OFF")
    assert "-mno-amx-tile" in tool.CMAKE_ARGS and "-mno-amx-int8" in tool.CMAKE_ARGS


# ---- real probe children and a real shard ----------------------------------------------------------
@pytest.mark.llm
def test_a_real_probe_child_that_decodes_keeps_repacking(model_path, tmp_path):
    decision = BufferPolicy("auto", tmp_path).for_model(model_path, n_gpu_layers=0)
    assert decision.use_extra_bufts and not decision.fallback
    assert len(list(tmp_path.glob("*.json"))) == 1  # remembered: the next start loads straight away


@pytest.mark.llm
def test_a_probe_child_killed_by_sigsegv_falls_back_without_extra_buffer_types(model_path, tmp_path):
    decision = BufferPolicy("auto", tmp_path, fault="SIGSEGV").for_model(model_path, n_gpu_layers=0)
    assert (decision.use_extra_bufts, decision.fallback, decision.n_gpu_layers) == (False, True, 0)
    assert "SIGSEGV" in decision.reason


@pytest.mark.llm
def test_a_build_the_cpu_cannot_run_is_refused_by_name(model_path, tmp_path, monkeypatch):
    from themis_shard.llm import cpu_probe

    monkeypatch.setattr(cpu_probe, "compiled_features", lambda: frozenset({"AVX2", "AVX512"}))
    monkeypatch.setattr(cpu_probe, "machine_flags", lambda: frozenset({"avx", "avx2"}))
    with pytest.raises(UnsupportedCPU, match=r"AVX512 \(avx512f\)"):
        BufferPolicy("auto", tmp_path).for_model(model_path, n_gpu_layers=0)


@pytest.mark.llm
def test_a_shard_whose_probe_crashes_serves_the_reference_greedy_text(make_server, model_path, tmp_path):
    from themis_shard.llm.native import NativeModel

    from .conftest import NOISE_LOGITS
    from .reference import greedy_reference

    srv = make_server(probe_fault="SIGSEGV", probe_cache_dir=str(tmp_path))
    prompt = "The capital of France is"
    with httpx.Client(base_url=srv.url, timeout=120) as http:
        health = http.get("/health").json()
        buffers = health["llm_buffers"]["gemma3-270m"]
        assert (buffers["use_extra_bufts"], buffers["fallback"]) == (False, True)
        assert "SIGSEGV" in buffers["reason"]
        metrics = http.get("/metrics").text
        assert 'themis_llm_extra_buffer_types{model="gemma3-270m"} 0.0' in metrics
        assert 'themis_llm_cpu_probe_fallback{model="gemma3-270m"} 1.0' in metrics
        served = http.post("/v1/infer", json={"prompt": prompt, "max_tokens": 16, "temperature": 0}).json()
    plain = NativeModel(model_path, n_gpu_layers=0, use_extra_bufts=False)  # llama.cpp, no repacking
    try:
        tokens, margins = greedy_reference(plain, plain.tokenize(prompt), 16)
        expected = [plain.detokenize(tokens[: i + 1]) for i in range(len(tokens))]
    finally:
        plain.close()
    # equal up to a batch-shape near-tie (the engine batches; the reference decodes one by one)
    diverged = next((i for i, text in enumerate(expected) if not served["text"].startswith(text)), None)
    assert diverged is None or margins[diverged] <= NOISE_LOGITS, (served["text"], expected[-1])
    assert served["tokens"] == 16 and len(served["text"]) > 10
