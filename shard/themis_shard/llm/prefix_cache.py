"""KV-prefix cache of one model on one shard (paper §IV-D).

* **Identity** — a prompt is cut into fixed blocks of ``block`` tokens; block ``i``'s hash is
  ``sha256(hash[i-1] ‖ tokens of block i)``, seeded with the model's sha256, the block size and
  the context settings (so states of incompatible shards never share a hash). Any block-aligned
  prefix of any prompt has a hash, so a shared system prompt is found even when the rest of the
  prompts differ.
* **Entries** — a saved state covers ``n`` tokens (a block boundary). An entry also serves a
  shorter block boundary ``k`` of its own tokens (restore, then drop positions ≥ k) when the
  state still holds every position the sliding-window layers need at ``k``: measured here, the
  SWA cache keeps only the last ``n_swa`` positions even with ``swa_full`` (a 704-token state
  starts at position 192), so trimming is allowed only for ``k - n_swa ≥ min_pos``.
  ``covered`` maps each such hash to the entry.
* **Budget** — entries live in RAM under an LRU byte budget; with a directory they are also
  written to disk (own byte budget) and come back from there after a RAM eviction.

``PrefixCache`` is plain thread-safe state (HTTP handlers export/import, the engine thread
restores/saves), pure Python + numpy; the engine side is ``prefix_hook.py``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from themis_core.data_format import FormatTooNew, directory_format

log = logging.getLogger(__name__)


def chain_seed(model_sha256: str, block: int, compat: dict) -> bytes:
    key = f"{model_sha256}|{block}|" + ",".join(f"{k}={compat[k]}" for k in sorted(compat))
    return hashlib.sha256(key.encode()).digest()


def block_hashes(tokens, block: int, seed: bytes, limit: int | None = None) -> list[str]:
    """Hash of every block-aligned prefix of ``tokens`` (≤ ``limit`` tokens): index i covers
    ``(i+1)*block`` tokens. Hex strings of 32 characters (128 bits)."""
    n = len(tokens) if limit is None else min(limit, len(tokens))
    arr = np.asarray(tokens[: (n // block) * block], dtype="<i4")
    out: list[str] = []
    h = seed
    for i in range(0, len(arr), block):
        h = hashlib.sha256(h + arr[i : i + block].tobytes()).digest()
        out.append(h[:16].hex())
    return out


@dataclass(eq=False)
class PrefixEntry:
    key: str  # hash of its full prefix
    tokens: tuple[int, ...]
    state: bytes
    hashes: list[str]  # hashes of every block boundary it covers (last == key)
    min_pos: int = 0  # first position still in the state (sliding-window layers drop older ones)
    created: float = field(default_factory=time.time)
    hits: int = 0

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        return len(self.state)


@dataclass(frozen=True, slots=True)
class Hit:
    entry: PrefixEntry
    n_tokens: int  # tokens to keep (≤ entry.n_tokens)


#: The disk tier's file layout (``<key>.kvp``: token count, min_pos, tokens, state).
DISK_FORMAT = 1


def _usable_disk_tier(path: Path) -> Path | None:
    """The disk tier's directory, or None (RAM only) when a newer Themis wrote it: a cache is
    not worth stopping the shard for, and its files are never misread."""
    try:
        directory_format(path, f"KV-prefix cache {path}", DISK_FORMAT)
    except FormatTooNew as exc:
        log.warning("%s; the disk tier is off", exc)
        return None
    return path


class PrefixCache:
    def __init__(
        self,
        *,
        seed: bytes,
        block: int = 64,
        budget_bytes: int = 256 << 20,
        trim: bool = True,
        swa_window: int = 0,
        disk_dir: str | Path | None = None,
        disk_budget_bytes: int = 2 << 30,
        on_evict=None,
    ) -> None:
        self.seed = seed
        self.block = block
        self.budget_bytes = budget_bytes
        self.trim = trim
        self.swa_window = swa_window
        self._lock = threading.RLock()
        self._entries: OrderedDict[str, PrefixEntry] = OrderedDict()
        self._covered: dict[str, str] = {}  # block hash → entry key
        self.bytes = 0
        self.evictions = 0
        self.disk_dir = Path(disk_dir) if disk_dir else None
        self.disk_budget_bytes = disk_budget_bytes
        self.on_evict = on_evict
        self.version = 0  # bumps on every change (the gossip announcement rebuilds on change)
        if self.disk_dir:
            self.disk_dir = _usable_disk_tier(self.disk_dir)

    # -- identity ----------------------------------------------------------------------------

    def hashes(self, tokens, limit: int | None = None) -> list[str]:
        return block_hashes(tokens, self.block, self.seed, limit)

    def boundary(self, n_prompt: int) -> int:
        """Longest block-aligned prefix that leaves at least one prompt token to decode."""
        return ((n_prompt - 1) // self.block) * self.block if n_prompt > 1 else 0

    # -- queries -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._entries or self._on_disk(key) is not None

    def keys(self) -> list[tuple[str, int, int]]:
        """(key, n_tokens, bytes) of every entry in RAM, most recently used first."""
        with self._lock:
            return [(k, e.n_tokens, e.nbytes) for k, e in reversed(self._entries.items())]

    def get(self, key: str) -> PrefixEntry | None:
        with self._lock:
            e = self._entries.get(key)
            if e is not None:
                self._entries.move_to_end(key)
                return e
        return self._load_disk(key)

    def lookup(
        self, tokens, limit: int | None = None, hashes: list[str] | None = None, *, touch: bool = True
    ) -> Hit | None:
        """Longest cached block-aligned prefix of ``tokens`` of at most ``limit`` tokens
        (``touch``: count the hit and refresh its LRU position — False for mere inspection)."""
        hs = hashes if hashes is not None else self.hashes(tokens, limit)
        if limit is not None:
            hs = hs[: limit // self.block]
        with self._lock:
            for i in range(len(hs) - 1, -1, -1):
                h = hs[i]
                key = h if h in self._entries else (self._covered.get(h) if self.trim else None)
                if key is None and self.disk_dir and self._on_disk(h) is not None:
                    self._load_disk(h)
                    key = h if h in self._entries else None
                if key is None:
                    continue
                e = self._entries[key]
                n = (i + 1) * self.block
                if tuple(tokens[:n]) != e.tokens[:n]:  # a hash collision, however unlikely
                    continue
                if touch:
                    self._entries.move_to_end(key)
                    e.hits += 1
                return Hit(e, n)
        return None

    # -- updates -----------------------------------------------------------------------------

    def trimmable(self, k: int, min_pos: int) -> bool:
        return self.trim and (min_pos == 0 or k - self.swa_window >= min_pos)

    def put(self, tokens, state: bytes, *, min_pos: int = 0, persist: bool = True) -> PrefixEntry | None:
        tokens = tuple(int(t) for t in tokens)
        if not tokens or len(tokens) % self.block or len(state) > self.budget_bytes:
            return None
        full = self.hashes(tokens)
        # The hashes this entry can serve: its own, and shorter boundaries it can be trimmed to.
        hs = [h for i, h in enumerate(full[:-1]) if self.trimmable((i + 1) * self.block, min_pos)] + full[-1:]
        e = PrefixEntry(full[-1], tokens, state, hs, min_pos=min_pos)
        with self._lock:
            old = self._entries.pop(e.key, None)
            if old is not None:
                self.bytes -= old.nbytes
            self._entries[e.key] = e
            self.bytes += e.nbytes
            for h in hs:
                cur = self._covered.get(h)
                if cur is None or cur not in self._entries or self._entries[cur].n_tokens >= e.n_tokens:
                    self._covered[h] = e.key  # shortest covering entry: cheapest to restore
            self._evict()
            self.version += 1
        if persist and self.disk_dir:
            self._write_disk(e)
        return e

    def remove(self, key: str) -> None:
        with self._lock:
            e = self._entries.pop(key, None)
            if e is not None:
                self._forget(e)
                self.version += 1

    def _evict(self) -> None:
        while self.bytes > self.budget_bytes and self._entries:
            _, e = self._entries.popitem(last=False)
            self._forget(e)
            self.evictions += 1
            if self.on_evict:
                self.on_evict(e)

    def _forget(self, e: PrefixEntry) -> None:
        self.bytes -= e.nbytes
        for h in e.hashes:
            if self._covered.get(h) == e.key:
                del self._covered[h]
                best = min(
                    (o for o in self._entries.values() if h in o.hashes),
                    key=lambda o: o.n_tokens,
                    default=None,
                )
                if best is not None:
                    self._covered[h] = best.key

    # -- disk tier ---------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        return self.disk_dir / f"{key}.kvp"  # type: ignore[operator]

    def _on_disk(self, key: str) -> Path | None:
        if not self.disk_dir or len(key) != 32 or not all(c in "0123456789abcdef" for c in key):
            return None
        p = self._path(key)
        return p if p.is_file() else None

    def _write_disk(self, e: PrefixEntry) -> None:
        try:
            p = self._path(e.key)
            tmp = p.with_suffix(".tmp")
            arr = np.asarray(e.tokens, dtype="<u4").tobytes()
            head = len(e.tokens).to_bytes(4, "little") + e.min_pos.to_bytes(4, "little")
            tmp.write_bytes(head + arr + e.state)
            os.replace(tmp, p)
            files = sorted(self.disk_dir.glob("*.kvp"), key=lambda f: f.stat().st_mtime)  # type: ignore[union-attr]
            total = sum(f.stat().st_size for f in files)
            while total > self.disk_budget_bytes and files:
                f = files.pop(0)
                total -= f.stat().st_size
                f.unlink(missing_ok=True)
        except OSError:
            log.warning("could not write KV prefix %s to disk", e.key, exc_info=True)

    def _load_disk(self, key: str) -> PrefixEntry | None:
        p = self._on_disk(key)
        if p is None:
            return None
        try:
            raw = p.read_bytes()
            n = int.from_bytes(raw[:4], "little")
            min_pos = int.from_bytes(raw[4:8], "little")
            tokens = np.frombuffer(raw[8 : 8 + 4 * n], dtype="<u4").tolist()
            state = raw[8 + 4 * n :]
        except (OSError, ValueError):
            return None
        e = self.put(tokens, state, min_pos=min_pos, persist=False)
        return e if e is not None and e.key == key else None
