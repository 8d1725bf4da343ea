"""The manifest: what a correct striped model is (layout, sizes, a crc32 per unit, the file's sha256).

It is content-addressed — ``key`` is a prefix of the sha256 of its canonical JSON — so two shards
that computed the same layout of the same file agree on the key without talking, and a manifest
that was tampered with or belongs to another layout is refused (``ManifestError``) instead of
being used to "repair" good units into bad ones.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .layout import CODEC_BY_MODE, LayoutError, RaidLayout

FORMAT_VERSION = 1


class ManifestError(ValueError):
    """A manifest that is malformed, inconsistent, or does not match what it claims."""


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: int = FORMAT_VERSION
    name: str = Field(min_length=1, max_length=200)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    mode: str
    shards: tuple[str, ...]
    data_units: int = Field(ge=1)
    parity_units: int = Field(ge=0)
    unit_size: int = Field(ge=64)
    #: crc32[stripe][unit] for every unit, redundancy included.
    crc32: tuple[tuple[int, ...], ...]

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        if self.format != FORMAT_VERSION:
            raise ValueError(f"manifest format {self.format} is not supported (want {FORMAT_VERSION})")
        if self.mode not in CODEC_BY_MODE:
            raise ValueError(f"unknown mode {self.mode!r}")
        layout = self.layout  # raises LayoutError (a ValueError) on an unsatisfiable layout
        stripes = layout.stripes(self.size)
        if len(self.crc32) != stripes:
            raise ValueError(f"{len(self.crc32)} crc rows for {stripes} stripes")
        if any(len(row) != layout.width for row in self.crc32):
            raise ValueError(f"every stripe needs {layout.width} unit crcs")
        if any(not 0 <= c <= 0xFFFFFFFF for row in self.crc32 for c in row):
            raise ValueError("crc32 values must be unsigned 32-bit")
        return self

    @property
    def layout(self) -> RaidLayout:
        return RaidLayout(self.mode, self.shards, self.data_units, self.parity_units, self.unit_size)

    @property
    def stripes(self) -> int:
        return len(self.crc32)

    def crc(self, stripe: int, index: int) -> int:
        return self.crc32[stripe][index]

    def canonical(self) -> bytes:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode()

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.canonical()).hexdigest()

    @property
    def key(self) -> str:
        """Content address: names the unit set on disk and in URLs."""
        return self.digest[:24]

    def summary(self) -> dict:
        return {
            "key": self.key,
            "name": self.name,
            "sha256": self.sha256,
            "size": self.size,
            "stripes": self.stripes,
            **self.layout.describe(),
        }

    @classmethod
    def parse(cls, raw: bytes | str, expect_key: str | None = None) -> Manifest:
        try:
            manifest = cls.model_validate(json.loads(raw))
        except (ValueError, ValidationError, LayoutError) as exc:
            raise ManifestError(f"invalid manifest: {_short(exc)}") from None
        if expect_key is not None and manifest.key != expect_key:
            raise ManifestError(f"manifest content does not match its key {expect_key} (got {manifest.key})")
        return manifest


def _short(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        errs = exc.errors()[:3]
        return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'manifest'}: {e['msg']}" for e in errs)
    return str(exc)[:300]
