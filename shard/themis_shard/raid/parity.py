"""Erasure codecs over equal-sized units: none (RAID0), mirror (RAID1), XOR (RAID5), Reed–Solomon (RAID6).

Pure functions of their inputs. Why the XOR is written the way it is (ARCHITECTURE.md §3):
numpy XOR over 64-bit words in cache-sized blocks, into an output buffer the caller reuses,
runs at the memory-copy limit; a naive ``reduce`` allocates per step (2× slower) and first-touch
allocation runs at 0.5 GB/s. Reed–Solomon goes through a maintained SIMD library
(``reed-solomon-leopard``, the ``reed-solomon-simd`` crate: any k of k + m units restore a stripe).

On a GPU the same codes run through an array module (cupy; numpy is the same code on the CPU):
XOR as above, and Reed–Solomon as :class:`LinearRSCodec`. Every Reed–Solomon code is linear over
GF(2): each 16-bit parity symbol is an XOR, over the data units, of a fixed 16×16 bit matrix
applied to the data symbol at the same position. Those matrices are read off the library itself
(encoding unit vectors), so the device code is bit-identical to leopard's by construction, needs
no reimplementation of its field arithmetic, and is checked against it symbol for symbol.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

try:  # ISA-L crc32: ~10 GB/s here, zlib's is ~1 GB/s
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - optional acceleration
    _crc32 = zlib.crc32

#: XOR block: the output block stays in L2 (1 MiB per core here) while every source is folded
#: in; measured here 1 MiB beats 256 KiB by ~25 % at k = 7 (fewer numpy calls, same traffic).
XOR_BLOCK_BYTES = 1 << 20


class NotEnoughUnits(ValueError):
    """Fewer surviving units than the codec needs: the stripe is lost (beyond tolerance)."""


def crc32(data: Any) -> int:
    return _crc32(memoryview(data).cast("B")) & 0xFFFFFFFF


def array_module(prefer_gpu: bool = True) -> Any:
    """cupy when a CUDA device is usable, numpy otherwise (decided at run time, once)."""
    if prefer_gpu:
        try:
            import cupy

            if cupy.cuda.is_available():
                return cupy
        except Exception:  # no cupy, no driver, no device: the CPU codes
            pass
    return np


def to_host(xp: Any, a: Any) -> np.ndarray:
    """A host (numpy) array of ``a``, copying from the device when ``xp`` is cupy."""
    return a if xp is np else xp.asnumpy(a)


def as_u8(buf: Any) -> np.ndarray:
    if isinstance(buf, np.ndarray) and buf.dtype == np.uint8:
        return buf
    return np.frombuffer(buf, dtype=np.uint8)


def xor_into(out: Any, sources: Sequence[Any], block: int = XOR_BLOCK_BYTES, xp: Any = np) -> Any:
    """``out = sources[0] ^ sources[1] ^ …`` block by block, without temporaries."""
    if not sources:
        raise ValueError("xor of no sources")
    n = out.nbytes
    if any(s.nbytes != n for s in sources):
        raise ValueError("xor sources and output differ in length")
    wide = n % 8 == 0
    o_all = out.view(xp.uint64) if wide else out
    srcs = [s.view(xp.uint64) if wide else s for s in sources]
    if len(srcs) == 1:
        xp.copyto(o_all, srcs[0])
        return out
    step = block // 8 if wide else block
    total = o_all.size
    for lo in range(0, total, step):
        hi = min(lo + step, total)
        o = o_all[lo:hi]
        xp.bitwise_xor(srcs[0][lo:hi], srcs[1][lo:hi], out=o)
        for s in srcs[2:]:
            xp.bitwise_xor(o, s[lo:hi], out=o)
    return out


class Codec(Protocol):
    k: int
    m: int

    def encode(self, data: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The m redundancy units of k data units (views valid until the next call)."""

    def reconstruct(self, present: Mapping[int, np.ndarray], want: Iterable[int]) -> dict[int, np.ndarray]:
        """Units ``want`` (data or redundancy indices) from any sufficient ``present`` set."""


def _check(k: int, m: int, present: Mapping[int, Any]) -> None:
    bad = [i for i in present if not 0 <= i < k + m]
    if bad:
        raise ValueError(f"unit indices {bad} outside 0..{k + m - 1}")
    if len(present) < k:
        raise NotEnoughUnits(f"{len(present)} of {k + m} units survive, {k} needed")


class NoneCodec:
    """RAID0: no redundancy; a lost unit is lost."""

    def __init__(self, k: int) -> None:
        self.k, self.m = k, 0

    def encode(self, data: Sequence[np.ndarray]) -> list[np.ndarray]:
        return []

    def reconstruct(self, present: Mapping[int, np.ndarray], want: Iterable[int]) -> dict[int, np.ndarray]:
        missing = [i for i in want if i not in present]
        if missing:
            raise NotEnoughUnits(f"raid0 has no redundancy: units {missing} are lost")
        return {i: present[i] for i in want}


class MirrorCodec:
    """RAID1: every redundancy unit is a copy of the one data unit."""

    def __init__(self, m: int) -> None:
        self.k, self.m = 1, m

    def encode(self, data: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [data[0]] * self.m

    def reconstruct(self, present: Mapping[int, np.ndarray], want: Iterable[int]) -> dict[int, np.ndarray]:
        _check(1, self.m, present)
        copy = next(iter(present.values()))
        return {i: present.get(i, copy) for i in want}


class XorCodec:
    """RAID5: one parity unit P = D0 ^ … ^ Dk−1; any single lost unit is the XOR of the others."""

    def __init__(self, k: int, unit_size: int, xp: Any = np) -> None:
        self.k, self.m = k, 1
        self.xp = xp
        self._out = xp.empty(unit_size, dtype=xp.uint8)  # reused: first touch is the slow part

    def encode(self, data: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(data) != self.k:
            raise ValueError(f"xor encode wants {self.k} data units, got {len(data)}")
        return [xor_into(self._out, data, xp=self.xp)]

    def reconstruct(self, present: Mapping[int, np.ndarray], want: Iterable[int]) -> dict[int, np.ndarray]:
        _check(self.k, 1, present)
        out: dict[int, np.ndarray] = {}
        for i in want:
            if i in present:
                out[i] = present[i]
                continue
            others = [present[j] for j in range(self.k + 1) if j != i and j in present]
            if len(others) < self.k:
                raise NotEnoughUnits(f"xor needs all {self.k} other units to rebuild unit {i}")
            out[i] = xor_into(self._out, others, xp=self.xp)
        return out


class RSCodec:
    """RAID6 and beyond: systematic Reed–Solomon k + m over GF(2^16) (reed-solomon-leopard)."""

    def __init__(self, k: int, m: int) -> None:
        import reed_solomon_leopard

        self._rs = reed_solomon_leopard
        self.k, self.m = k, m

    def encode(self, data: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(data) != self.k:
            raise ValueError(f"rs encode wants {self.k} data units, got {len(data)}")
        parity = self._rs.encode([_bytes(d) for d in data], self.m)
        return [np.frombuffer(p, dtype=np.uint8) for p in parity]

    def reconstruct(self, present: Mapping[int, np.ndarray], want: Iterable[int]) -> dict[int, np.ndarray]:
        _check(self.k, self.m, present)
        want = list(want)
        data = {i: present[i] for i in range(self.k) if i in present}
        if len(data) < self.k:
            originals = {i: _bytes(v) for i, v in data.items()}
            recovery = {i - self.k: _bytes(v) for i, v in present.items() if i >= self.k}
            restored = self._rs.decode(self.k, self.m, originals, recovery)
            data.update({i: np.frombuffer(v, dtype=np.uint8) for i, v in restored.items()})
        return _wanted(self, present, data, want)


#: Leopard's memory layout: each 64-byte block holds 32 symbols, their low bytes first.
_BLOCK, _HALF = 64, 32
#: Unit-vector probes: 16 symbols at positions 0..15 with bit b set at position b.
_PROBE_BITS = (1 << np.arange(16)).astype(np.uint16)


def _probe_unit() -> bytes:
    u = np.zeros(_BLOCK, np.uint8)
    u[:16] = _PROBE_BITS & 0xFF
    u[_HALF : _HALF + 16] = _PROBE_BITS >> 8
    return u.tobytes()


def _probe_columns(unit: bytes) -> np.ndarray:
    """The 16 symbols at positions 0..15 of a 64-byte unit: the images of the 16 unit bits."""
    u = np.frombuffer(unit, np.uint8)
    return u[:16].astype(np.uint16) | (u[_HALF : _HALF + 16].astype(np.uint16) << 8)


def _byte_tables(columns: np.ndarray) -> np.ndarray:
    """(2, 256) uint16: the bit matrix applied to every low byte and every high byte value."""
    bits = (np.arange(256)[:, None] >> np.arange(8)) & 1  # (256, 8)
    out = np.zeros((2, 256), np.uint16)
    for half in range(2):
        cols = columns[8 * half : 8 * half + 8]
        out[half] = np.bitwise_xor.reduce(np.where(bits == 1, cols, np.uint16(0)), axis=1)
    return out


class LinearRSCodec:
    """Leopard's Reed–Solomon k + m as byte-table lookups on an array module (cupy or numpy).

    Units are 1-D uint8 arrays of ``xp`` whose length is a multiple of 64 bytes (RAID units are).
    Encode tables come from k encodes of probe units; the decode tables of one set of surviving
    units from k decodes, cached per set (a rebuild sees few distinct sets).
    """

    def __init__(self, k: int, m: int, xp: Any = np) -> None:
        import reed_solomon_leopard

        self._rs = reed_solomon_leopard
        self.k, self.m, self.xp = k, m, xp
        zero, probe = bytes(_BLOCK), _probe_unit()
        tables = np.zeros((m, k, 2, 256), np.uint16)
        for i in range(k):
            parity = self._rs.encode([probe if j == i else zero for j in range(k)], m)
            for j in range(m):
                tables[j, i] = _byte_tables(_probe_columns(parity[j]))
        self._encode = xp.asarray(tables)
        self._decode: dict[tuple[tuple[int, ...], tuple[int, ...]], Any] = {}

    def _apply(self, tables: Any, units: Sequence[Any]) -> list[Any]:
        """``out[j] = XOR_i tables[j, i](units[i])``, symbol by symbol, in leopard's layout."""
        xp = self.xp
        n = units[0].nbytes
        if n % _BLOCK or any(u.nbytes != n for u in units):
            raise ValueError(f"units must be equally long multiples of {_BLOCK} bytes")
        blocks = [u.reshape(-1, 2, _HALF) for u in units]
        out = []
        for j in range(tables.shape[0]):
            acc = xp.zeros((n // _BLOCK, _HALF), dtype=xp.uint16)
            for i, b in enumerate(blocks):
                acc ^= tables[j, i, 0][b[:, 0, :]]
                acc ^= tables[j, i, 1][b[:, 1, :]]
            unit = xp.empty((n // _BLOCK, 2, _HALF), dtype=xp.uint8)
            unit[:, 0, :] = (acc & 0xFF).astype(xp.uint8)
            unit[:, 1, :] = (acc >> 8).astype(xp.uint8)
            out.append(unit.reshape(-1))
        return out

    def encode(self, data: Sequence[Any]) -> list[Any]:
        if len(data) != self.k:
            raise ValueError(f"rs encode wants {self.k} data units, got {len(data)}")
        return self._apply(self._encode, data)

    def _decode_tables(self, inputs: tuple[int, ...], lost: tuple[int, ...]) -> Any:
        """Tables mapping the k surviving ``inputs`` to the ``lost`` data units."""
        key = (inputs, lost)
        if key not in self._decode:
            zero, probe = bytes(_BLOCK), _probe_unit()
            tables = np.zeros((len(lost), self.k, 2, 256), np.uint16)
            for col, unit in enumerate(inputs):
                units = {i: probe if i == unit else zero for i in inputs}
                originals = {i: u for i, u in units.items() if i < self.k}
                recovery = {i - self.k: u for i, u in units.items() if i >= self.k}
                restored = self._rs.decode(self.k, self.m, originals, recovery)
                for row, i in enumerate(lost):
                    tables[row, col] = _byte_tables(_probe_columns(restored[i]))
            self._decode[key] = self.xp.asarray(tables)
        return self._decode[key]

    def reconstruct(self, present: Mapping[int, Any], want: Iterable[int]) -> dict[int, Any]:
        _check(self.k, self.m, present)
        want = list(want)
        data = {i: present[i] for i in range(self.k) if i in present}
        lost = tuple(i for i in range(self.k) if i not in present)
        if lost:
            inputs = tuple(sorted(present))[: self.k]
            rebuilt = self._apply(self._decode_tables(inputs, lost), [present[i] for i in inputs])
            data.update(zip(lost, rebuilt, strict=True))
        return _wanted(self, present, data, want)


class OnDevice:
    """A codec over ``xp`` arrays served to callers holding host (numpy) units: copies in and out."""

    def __init__(self, codec: Any, xp: Any) -> None:
        self.codec, self.xp = codec, xp
        self.k, self.m = codec.k, codec.m

    def encode(self, data: Sequence[np.ndarray]) -> list[np.ndarray]:
        dev = [self.xp.asarray(d) for d in data]
        return [to_host(self.xp, p) for p in self.codec.encode(dev)]

    def reconstruct(self, present: Mapping[int, np.ndarray], want: Iterable[int]) -> dict[int, np.ndarray]:
        dev = {i: self.xp.asarray(u) for i, u in present.items()}
        return {i: to_host(self.xp, u) for i, u in self.codec.reconstruct(dev, want).items()}


def _wanted(
    codec: Any, present: Mapping[int, Any], data: Mapping[int, Any], want: list[int]
) -> dict[int, Any]:
    """Units ``want`` once all data units are whole: lost parity is encoded again."""
    k = codec.k
    out = {i: data[i] for i in want if i < k}
    lost_parity = [i for i in want if i >= k and i not in present]
    if lost_parity:
        parity = codec.encode([data[i] for i in range(k)])
        out.update({i: parity[i - k] for i in lost_parity})
    out.update({i: present[i] for i in want if i >= k and i in present})
    return out


def _bytes(buf: Any) -> bytes:
    """The library takes ``bytes``: reuse the one behind a unit read from disk or a peer."""
    if isinstance(buf, bytes):
        return buf
    base = getattr(buf, "base", None)
    if isinstance(base, bytes) and buf.nbytes == len(base):
        return base
    return memoryview(buf).cast("B").tobytes()


def make_codec(kind: str, k: int, m: int, unit_size: int, xp: Any = np) -> Codec:
    """The codec for host units; with ``xp`` = cupy, parity is computed on the device."""
    if kind == "none":
        return NoneCodec(k)
    if kind == "mirror":
        return MirrorCodec(m)
    if kind == "xor":
        return XorCodec(k, unit_size, xp) if xp is np else OnDevice(XorCodec(k, unit_size, xp), xp)
    if kind == "rs":
        # numpy's table lookups are slower than leopard's SIMD: on the CPU, leopard itself.
        return RSCodec(k, m) if xp is np else OnDevice(LinearRSCodec(k, m, xp), xp)
    raise ValueError(f"unknown codec {kind!r}")
