"""One shard's unit store on its weights volume: unit files checked against the manifest's crc32.

Layout on disk (all writes are temp file + rename, so a crash never leaves half a unit under a
unit's name)::

    <weights>/manifests/<key>.json   the manifests this shard knows
    <weights>/active                 key of the model the shard serves
    <weights>/units/<key>/<stripe>.<index>
    <weights>/models/<key>.gguf      the assembled model (sha256-verified before every load)
    <weights>/formed/<key>           marker: every shard of the layout once held all its units

A unit is only ever accepted or served after its length and crc32 match the manifest. Units are
not fsynced one by one: a unit torn by a power loss fails its crc and is rebuilt from parity,
which is cheaper than an fsync per MiB on the ingest path.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import numpy as np

from .layout import UnitRef
from .manifest import Manifest, ManifestError
from .parity import crc32


class UnitError(Exception):
    def __init__(self, ref: UnitRef, reason: str, message: str) -> None:
        super().__init__(f"unit {ref}: {message}")
        self.ref = ref
        self.reason = reason


class UnitMissing(UnitError):
    def __init__(self, ref: UnitRef) -> None:
        super().__init__(ref, "missing", "missing")


class UnitCorrupt(UnitError):
    def __init__(self, ref: UnitRef, message: str) -> None:
        super().__init__(ref, "corrupt", message)


def _atomic_write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


class UnitStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        for sub in ("manifests", "units", "models", "formed"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    # -- manifests ---------------------------------------------------------------------------------
    def save_manifest(self, manifest: Manifest) -> None:
        existing = self.manifest(manifest.key)
        if existing is None:
            _atomic_write(self.root / "manifests" / f"{manifest.key}.json", manifest.canonical())

    def manifest(self, key: str) -> Manifest | None:
        path = self.root / "manifests" / f"{key}.json"
        if not path.exists():
            return None
        return Manifest.parse(path.read_bytes(), expect_key=key)

    def manifests(self) -> list[Manifest]:
        out = []
        for p in sorted((self.root / "manifests").glob("*.json")):
            with contextlib.suppress(ManifestError, OSError):
                out.append(Manifest.parse(p.read_bytes(), expect_key=p.stem))
        return out

    @property
    def active_key(self) -> str | None:
        path = self.root / "active"
        return path.read_text().strip() or None if path.exists() else None

    def set_active(self, key: str) -> None:
        _atomic_write(self.root / "active", key.encode())

    def active(self) -> Manifest | None:
        key = self.active_key
        return self.manifest(key) if key else None

    def is_formed(self, key: str) -> bool:
        return (self.root / "formed" / key).exists()

    def mark_formed(self, key: str) -> None:
        _atomic_write(self.root / "formed" / key, b"")

    # -- units -------------------------------------------------------------------------------------
    def unit_path(self, key: str, ref: UnitRef) -> Path:
        return self.root / "units" / key / f"{ref.stripe}.{ref.index}"

    def write_unit(self, manifest: Manifest, ref: UnitRef, data) -> None:
        """Store a unit after checking it against the manifest (length and crc32)."""
        self._check(manifest, ref, data)
        _atomic_write(self.unit_path(manifest.key, ref), memoryview(data).cast("B"))

    def read_unit(self, manifest: Manifest, ref: UnitRef) -> np.ndarray:
        """The unit, verified; UnitMissing / UnitCorrupt otherwise."""
        return np.frombuffer(self.read_unit_bytes(manifest, ref), dtype=np.uint8)

    def read_unit_bytes(self, manifest: Manifest, ref: UnitRef) -> bytes:
        """The unit's bytes, verified (served to peers as they are: no extra copy)."""
        self._check_ref(manifest, ref)
        try:
            data = self.unit_path(manifest.key, ref).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            raise UnitMissing(ref) from None
        self._check(manifest, ref, data)
        return data

    def unit_state(self, manifest: Manifest, ref: UnitRef) -> str:
        try:
            self.read_unit(manifest, ref)
        except UnitError as exc:
            return exc.reason
        return "ok"

    def drop_unit(self, key: str, ref: UnitRef) -> None:
        self.unit_path(key, ref).unlink(missing_ok=True)

    @staticmethod
    def _check_ref(manifest: Manifest, ref: UnitRef) -> None:
        if not (0 <= ref.stripe < manifest.stripes and 0 <= ref.index < manifest.layout.width):
            raise UnitCorrupt(ref, f"not a unit of manifest {manifest.key}")

    def _check(self, manifest: Manifest, ref: UnitRef, data) -> None:
        self._check_ref(manifest, ref)
        n = memoryview(data).nbytes
        if n != manifest.unit_size:
            raise UnitCorrupt(ref, f"length {n} != unit size {manifest.unit_size} (truncated?)")
        got, want = crc32(data), manifest.crc(ref.stripe, ref.index)
        if got != want:
            raise UnitCorrupt(ref, f"crc32 {got:08x} != manifest {want:08x}")

    # -- the assembled model ------------------------------------------------------------------------
    def model_path(self, key: str) -> Path:
        return self.root / "models" / f"{key}.gguf"

    def wipe(self) -> None:
        """Remove everything (tests; an operator replacing a volume)."""
        shutil.rmtree(self.root, ignore_errors=True)
        self.__init__(self.root)
