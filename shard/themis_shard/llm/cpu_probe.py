"""Decide at start-up whether llama.cpp may use its extra CPU buffer types on this machine.

Extra buffer types are llama.cpp's weight repacking (AVX2/AVX-512 interleaved layouts, and AMX
tiles where compiled in). Some virtual machines advertise AMX in /proc/cpuinfo but trap its
instructions, and a build that uses them dies with SIGSEGV/SIGILL at the first matrix multiply —
a signal, which no ``try`` can catch. So the first decode runs in a child process: if it dies,
the shard loads the model without extra buffer types (slower prefill, same results) and says so
in /health and /metrics. GPU offload is never part of the decision: the fallback keeps every
layer the settings put on the GPU.

A build compiled for CPU features this machine lacks (a wheel made elsewhere) is refused before
any of that, with an error that names the features.

Outcomes are cached on disk per (llama.cpp build, CPU, model file, GPU layers): the probe costs
one model load the first time only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import llama_cpp as L

from .artifacts import cache_root, exclusive
from .model import ModelError

BufferMode = Literal["auto", "on", "off"]

#: llama.cpp's compile-time feature names (llama_print_system_info) → /proc/cpuinfo flags.
BUILD_FEATURE_FLAGS: dict[str, str] = {
    "SSE3": "pni",
    "SSSE3": "ssse3",
    "AVX": "avx",
    "AVX2": "avx2",
    "F16C": "f16c",
    "FMA": "fma",
    "BMI2": "bmi2",
    "AVX_VNNI": "avx_vnni",
    "AVX512": "avx512f",
    "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16",
    "AMX_INT8": "amx_int8",
}

PROBE_TIMEOUT_S = 180.0


class UnsupportedCPU(ModelError):
    """The llama.cpp build (or this machine's CPU) cannot run the model at all."""


@dataclass(frozen=True)
class ProbeResult:
    """How the probe child ended: exit code 0, another code, or a signal name."""

    returncode: int
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def signal_name(self) -> str | None:
        if self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    def describe(self) -> str:
        if self.ok:
            return "ok"
        how = f"died with {self.signal_name}" if self.signal_name else f"exited with {self.returncode}"
        return f"{how}{': ' + self.detail if self.detail else ''}"


@dataclass(frozen=True)
class BufferDecision:
    """What the model is loaded with, and why (shown in /health)."""

    use_extra_bufts: bool
    n_gpu_layers: int
    reason: str
    fallback: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


# -- pure parts ------------------------------------------------------------------------------------


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def cpu_model(cpuinfo: str) -> str:
    """The CPU's model name ("" when /proc/cpuinfo gives none)."""
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "model name":
            return value.strip()
    return ""


def build_features(system_info: str) -> frozenset[str]:
    """Features a build was compiled with: ``AVX2 = 1 | AVX512 = 1 | …`` → {"AVX2", "AVX512"}."""
    out = set()
    for part in system_info.replace("\n", "|").split("|"):
        name, eq, value = part.rpartition("=")
        name = name.split(":")[-1].strip()
        if eq and value.strip() == "1" and name:
            out.add(name)
    return frozenset(out)


def missing_features(build: frozenset[str], flags: frozenset[str]) -> list[str]:
    """Compiled-in features this CPU does not list (only those we can map to cpuinfo flags)."""
    if not flags:  # no /proc/cpuinfo flags line (not Linux x86): nothing to compare
        return []
    return sorted(f for f in build if f in BUILD_FEATURE_FLAGS and BUILD_FEATURE_FLAGS[f] not in flags)


def needs_probe(mode: BufferMode) -> bool:
    return mode == "auto"


def decide(mode: BufferMode, n_gpu_layers: int, probe: ProbeResult | None) -> BufferDecision:
    """The buffer policy for one model. GPU layers pass through untouched in every branch."""
    if mode == "on":
        return BufferDecision(True, n_gpu_layers, "extra buffer types forced on by settings")
    if mode == "off":
        return BufferDecision(False, n_gpu_layers, "extra buffer types turned off by settings")
    if probe is None or probe.ok:
        return BufferDecision(True, n_gpu_layers, "start-up probe decoded with extra buffer types")
    return BufferDecision(
        False,
        n_gpu_layers,
        f"start-up probe with extra buffer types {probe.describe()}; weight repacking is off",
        fallback=True,
    )


def probe_cache_key(*parts: object) -> str:
    return hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:24]


# -- I/O edges -------------------------------------------------------------------------------------


def machine_flags() -> frozenset[str]:
    return cpu_flags(_cpuinfo())


def machine_model() -> str:
    return cpu_model(_cpuinfo())


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def recall_json(cache_dir: Path, name: str) -> Any:
    """``name``.json from the probe cache, or None when it is absent or not JSON."""
    try:
        return json.loads((cache_dir / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def remember_json(cache_dir: Path, name: str, data: Any) -> None:
    """Write ``name``.json into the probe cache whole or not at all (a reader never sees half of
    it); raises OSError where the cache cannot be written (a read-only volume)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / f".{name}.{os.getpid()}"
    tmp.write_text(json.dumps(data))
    tmp.replace(cache_dir / f"{name}.json")


def library_identity() -> str:
    """Names, sizes and mtimes of llama-cpp-python's shared libraries: changes with every rebuild."""
    lib = Path(L.__file__).parent / "lib"
    files = sorted(lib.glob("*.so*")) if lib.is_dir() else []
    return ";".join(f"{f.name}:{f.stat().st_size}:{int(f.stat().st_mtime)}" for f in files)


def compiled_features() -> frozenset[str]:
    return build_features(L.llama_print_system_info().decode(errors="replace"))


def run_probe(
    path: Path,
    *,
    use_extra_bufts: bool,
    n_gpu_layers: int,
    embedding: bool,
    fault: str = "",
    timeout_s: float = PROBE_TIMEOUT_S,
) -> ProbeResult:
    cmd = [
        sys.executable, "-m", "themis_shard.llm.cpu_probe_child", str(path),
        "--extra-bufts", "1" if use_extra_bufts else "0",
        "--gpu-layers", str(n_gpu_layers),
    ]  # fmt: skip
    if embedding:
        cmd.append("--embedding")
    if fault:
        cmd += ["--fault", fault]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return ProbeResult(-int(signal.SIGKILL), f"no answer within {timeout_s:.0f} s")
    # A non-zero exit is the child's own message (last stderr line); after a signal that line is
    # whatever llama.cpp logged last, which says nothing about the crash.
    tail = (done.stderr or "").strip().splitlines()[-1:] if done.returncode > 0 else []
    return ProbeResult(done.returncode, tail[0][:300] if tail else "")


class BufferPolicy:
    """Runs (or recalls) the probe for each model file and returns its decision."""

    def __init__(self, mode: BufferMode, cache_dir: Path | None, fault: str = "") -> None:
        self.mode = mode
        self.cache_dir = cache_dir
        self.fault = fault

    def for_model(self, path: Path, *, n_gpu_layers: int, embedding: bool = False) -> BufferDecision:
        missing = missing_features(compiled_features(), machine_flags())
        if missing:
            raise UnsupportedCPU(
                "this llama.cpp build needs CPU features this machine lacks: "
                + ", ".join(f"{m} ({BUILD_FEATURE_FLAGS[m]})" for m in missing)
                + "; rebuild llama-cpp-python on this machine (make install) or use a portable image"
            )
        if not needs_probe(self.mode):
            return decide(self.mode, n_gpu_layers, None)
        probe = self._probe(path, True, n_gpu_layers, embedding, self.fault)
        decision = decide(self.mode, n_gpu_layers, probe)
        if decision.fallback:
            plain = self._probe(path, False, n_gpu_layers, embedding, "")
            if not plain.ok:
                raise UnsupportedCPU(
                    f"llama.cpp cannot run {path.name} on this CPU: with extra buffer types the probe "
                    f"{probe.describe()}, without them it {plain.describe()}"
                )
        return decision

    def _probe(self, path: Path, extra: bool, gpu: int, embedding: bool, fault: str) -> ProbeResult:
        st = path.stat()
        key = probe_cache_key(
            library_identity(), sorted(machine_flags()), path.resolve(), st.st_size, int(st.st_mtime),
            extra, gpu, embedding, fault,
        )  # fmt: skip
        cached = self._recall(key)
        if cached is not None:
            return cached
        if self.cache_dir is None:
            return self._run(key, path, extra, gpu, embedding, fault)
        # Shards starting together probe once: the others wait, then read the outcome.
        with exclusive(self.cache_dir / f"{key}.lock", f"probing llama.cpp on {path.name}"):
            cached = self._recall(key)
            return cached if cached is not None else self._run(key, path, extra, gpu, embedding, fault)

    def _run(self, key: str, path: Path, extra: bool, gpu: int, embedding: bool, fault: str) -> ProbeResult:
        result = run_probe(path, use_extra_bufts=extra, n_gpu_layers=gpu, embedding=embedding, fault=fault)
        if result.ok or result.signal_name not in (None, "SIGKILL"):  # a timeout is not remembered
            self._remember(key, result)
        return result

    def _recall(self, key: str) -> ProbeResult | None:
        if self.cache_dir is None:
            return None
        data = recall_json(self.cache_dir, key)
        try:
            return ProbeResult(int(data["returncode"]), str(data.get("detail", "")))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def _remember(self, key: str, result: ProbeResult) -> None:
        if self.cache_dir is None:
            return
        with contextlib.suppress(OSError):  # a read-only cache: probed again next start
            remember_json(self.cache_dir, key, asdict(result))


def default_cache_dir() -> Path:
    return cache_root() / "cpu-probe"


def default_policy() -> BufferPolicy:
    """The policy for loads that do not come through the shard's settings (tools, tests, bench)."""
    return BufferPolicy("auto", default_cache_dir())
