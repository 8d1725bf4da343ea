"""Where every unit of a striped model lives — a pure function of the plan and the settings.

A model file is cut into stripes of ``k`` data units of ``unit_size`` bytes (the last stripe is
zero-padded; the manifest keeps the true size). Each stripe adds ``m`` redundancy units:

* raid0 — k = N, m = 0: no redundancy, any lost shard loses the model.
* raid1 — k = 1, m = copies − 1 mirror units: every unit is held by ``copies`` shards.
* raid5 — k = N − 1, m = 1 XOR parity unit.
* raid6 — k + m Reed–Solomon (default k = N − 2, m = 2; any k of the k + m units restore the stripe).

Unit ``u`` (0…k−1 data, k…k+m−1 redundancy) of stripe ``s`` lives on ``shards[(s + u) % N]``:
a stripe's units sit on distinct shards (width k + m ≤ N), and the redundancy units rotate
with the stripe (RAID5's rotating parity) so no shard becomes a parity hot spot. Losing any
``m`` shards therefore costs each stripe at most ``m`` units — the layout's tolerance.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from .settings import UNIT_ALIGN, RaidSettings

Codec = Literal["none", "mirror", "xor", "rs"]
CODEC_BY_MODE: dict[str, Codec] = {"raid0": "none", "raid1": "mirror", "raid5": "xor", "raid6": "rs"}
MIN_SHARDS = {"raid0": 1, "raid1": 2, "raid5": 3, "raid6": 3}


class LayoutError(ValueError):
    """A layout the shard list or settings cannot satisfy."""


@dataclass(frozen=True, slots=True)
class UnitRef:
    stripe: int
    index: int

    def __str__(self) -> str:
        return f"{self.stripe}/{self.index}"


@dataclass(frozen=True)
class RaidLayout:
    mode: str
    shards: tuple[str, ...]
    k: int
    m: int
    unit_size: int

    def __post_init__(self) -> None:
        if self.mode not in CODEC_BY_MODE:
            raise LayoutError(f"unknown RAID mode {self.mode!r}; use one of {sorted(CODEC_BY_MODE)}")
        if len(set(self.shards)) != len(self.shards):
            raise LayoutError(f"duplicate shard ids in {list(self.shards)}")
        if len(self.shards) < MIN_SHARDS[self.mode]:
            raise LayoutError(
                f"{self.mode} needs at least {MIN_SHARDS[self.mode]} shards, got {len(self.shards)}"
            )
        if self.k < 1 or self.m < 0:
            raise LayoutError(f"bad geometry k={self.k}, m={self.m}")
        if self.width > len(self.shards):
            raise LayoutError(
                f"{self.mode} with k={self.k} + m={self.m} units per stripe needs "
                f"{self.width} shards, only {len(self.shards)} given"
            )
        expected_m = {
            "raid0": self.m == 0,
            "raid1": self.m >= 1 and self.k == 1,
            "raid5": self.m == 1,
            "raid6": self.m >= 1,
        }
        if not expected_m[self.mode]:
            raise LayoutError(f"{self.mode} cannot have k={self.k}, m={self.m}")
        if self.unit_size < UNIT_ALIGN or self.unit_size % UNIT_ALIGN:
            raise LayoutError(f"unit size {self.unit_size} must be a positive multiple of {UNIT_ALIGN} bytes")

    # -- construction ------------------------------------------------------------------------------
    @classmethod
    def build(cls, mode: str, shards: Sequence[str], settings: RaidSettings, copies: int = 2) -> RaidLayout:
        """The layout a plan's RAID mode implies for ``shards`` (ring order)."""
        shards = tuple(shards)
        n = len(shards)
        if mode == "raid0":
            k, m = n, 0
        elif mode == "raid1":
            k, m = 1, (settings.mirrors or copies) - 1
        elif mode == "raid5":
            k, m = n - 1, 1
        elif mode == "raid6":
            m = settings.parity_units
            k = settings.data_units or n - m
        else:
            raise LayoutError(f"unknown RAID mode {mode!r}")
        return cls(mode, shards, k, m, settings.unit_size)

    # -- geometry ----------------------------------------------------------------------------------
    @property
    def codec(self) -> Codec:
        return CODEC_BY_MODE[self.mode]

    @property
    def width(self) -> int:
        return self.k + self.m

    @property
    def tolerance(self) -> int:
        """Shards that may be lost at once without losing the model."""
        return self.m

    @property
    def stripe_bytes(self) -> int:
        return self.k * self.unit_size

    def stripes(self, size: int) -> int:
        if size < 0:
            raise LayoutError("negative file size")
        return max(1, -(-size // self.stripe_bytes))

    def shard_of(self, stripe: int, index: int) -> str:
        if not 0 <= index < self.width:
            raise LayoutError(f"unit index {index} outside 0..{self.width - 1}")
        return self.shards[(stripe + index) % len(self.shards)]

    def stripe_shards(self, stripe: int) -> tuple[str, ...]:
        return tuple(self.shard_of(stripe, u) for u in range(self.width))

    def is_parity(self, index: int) -> bool:
        return index >= self.k

    def units(self, size: int) -> Iterator[UnitRef]:
        for s in range(self.stripes(size)):
            for u in range(self.width):
                yield UnitRef(s, u)

    def units_on(self, shard: str, size: int) -> list[UnitRef]:
        """Units ``shard`` holds (derived, never stored)."""
        if shard not in self.shards:
            return []
        n = len(self.shards)
        pos = self.shards.index(shard)
        out = []
        for s in range(self.stripes(size)):
            u = (pos - s) % n
            if u < self.width:
                out.append(UnitRef(s, u))
        return out

    def data_span(self, stripe: int, index: int, size: int) -> tuple[int, int]:
        """File byte range [start, end) a data unit carries (end ≤ start + unit_size at EOF)."""
        start = (stripe * self.k + index) * self.unit_size
        return min(start, size), min(start + self.unit_size, size)

    def describe(self) -> dict:
        return {
            "mode": self.mode,
            "codec": self.codec,
            "shards": list(self.shards),
            "data_units": self.k,
            "parity_units": self.m,
            "unit_size": self.unit_size,
            "tolerance": self.tolerance,
        }
