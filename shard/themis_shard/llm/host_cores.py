"""Cores shared by demand among the engines of one host.

``themis up`` runs several shards on one machine, each with a model copy. Sized once, each engine
would get ``cores // engines`` threads, and a lone request — the usual case on a developer's
machine — would decode on a fraction of the cores while the rest idle (Gemma 3 270M on 2 cores:
28 tokens/s on one thread, 48 on two). So the host's shards share one small file: each engine
stamps its slot while it has work, and before each decode step takes ``cores // busy`` threads,
``busy`` counting the slots stamped recently. llama.cpp changes a context's threads between two
decodes (``llama_set_n_threads``); the computing thread's OpenMP pool keeps its workers.

A slot is 8 bytes: the host's monotonic clock in milliseconds when its engine last changed or
stamped its state, and whether it is busy (the low bit). A busy slot not stamped within
``STALE_MS`` counts as idle, so an engine killed mid-step frees its share. An engine that is
computing already counts one that went idle less than ``QUIET_MS`` ago as busy: the idle one's
next request is often on its way, and taking its cores for a step only to have it start beside
two threads spinning on its core cost more than it gained (2 clients on 3 shards, 2 cores: 9 %
fewer tokens/s without this rule, within noise with it). An engine starting on a request does
not wait for the quiet: the cores of an engine that has just finished are its to take (one
client's requests round-robin over the shards). Several engines of one shard (extra models)
share the shard's slot: it is busy while any of them is.

A shard stamps its slot when it opens the file and clears it when it closes it, so the slots
also say which shards' engines share this host (:meth:`HostCores.shards`): the cluster joins
requests to one of them rather than spreading them (``cluster/routing/prefix_routing.py``).
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

#: slots in the file (a shard's slot is its number in ``shard-N``; past it, no sharing)
HOST_SLOTS = 64
SLOT_BYTES = 8
#: a busy slot not stamped for this long is idle (longer than any one decode step)
STALE_MS = 5_000
#: an engine idle for less than this still holds its share
QUIET_MS = 100
#: a slot's value from its shard's start until its engine first works: idle since 1 ms
PRESENT = 1 << 1


def share(cores: int, busy: int) -> int:
    """Threads for one of ``busy`` engines computing at once on ``cores``."""
    return max(1, cores // max(1, busy))


def slot_of(shard_id: str) -> int | None:
    """``shard-N`` → N when it has a slot, else None (the shard's threads stay fixed)."""
    number = shard_id.rsplit("-", 1)[-1]
    return int(number) if number.isdigit() and int(number) < HOST_SLOTS else None


def shard_of(slot: int) -> str:
    """Slot N → ``shard-N``, as ``themis up`` names the shards it starts (:func:`slot_of`'s inverse
    for those names)."""
    return f"shard-{slot}"


def open_for(cores: int, file: str, shard_id: str) -> HostCores | None:
    """This shard's share of the host's cores (``LLMSettings.host_cores``), or None: off, or a
    shard without a slot (its threads stay fixed)."""
    if not cores:
        return None
    slot = slot_of(shard_id)
    if slot is None:
        log.warning("shard %s has no host-cores slot: its engine threads stay fixed", shard_id)
        return None
    return HostCores(Path(file), slot, cores)


def create(path: Path) -> None:
    """The shared file, all slots idle (``themis up``, before any shard starts)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(HOST_SLOTS * SLOT_BYTES))


class HostCores:
    """One shard's view of the host's shared slots; thread-safe."""

    def __init__(
        self, path: Path, slot: int, cores: int, *, clock_ms: Callable[[], int] | None = None
    ) -> None:
        if not 0 <= slot < HOST_SLOTS:
            raise ValueError(f"host-cores slot {slot} is outside 0..{HOST_SLOTS - 1}")
        if cores < 1:
            raise ValueError("host cores must be at least 1")
        self.cores = cores
        self._slot = slot * SLOT_BYTES
        self._clock_ms = clock_ms or (lambda: time.monotonic_ns() // 1_000_000)
        fd = os.open(path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size < HOST_SLOTS * SLOT_BYTES:
                raise ValueError(f"{path} is not a host-cores file ({HOST_SLOTS * SLOT_BYTES} bytes)")
            self._map = mmap.mmap(fd, HOST_SLOTS * SLOT_BYTES)
        finally:
            os.close(fd)
        self._lock = threading.Lock()
        self._busy: set[str] = set()
        # present from now on, until close(): idle since long ago (not "just went quiet")
        struct.pack_into("<q", self._map, self._slot, PRESENT)

    def mark(self, engine: str, busy: bool) -> None:
        """``engine`` has work (stamped again at every step) or has none left."""
        with self._lock:
            was_busy = bool(self._busy)
            if busy:
                self._busy.add(engine)
            else:
                self._busy.discard(engine)
            if self._busy or was_busy:  # an idle slot keeps the time it went idle
                struct.pack_into("<q", self._map, self._slot, (self._clock_ms() << 1) | bool(self._busy))

    def threads(self, starting: bool = False) -> int:
        """Threads for this shard's next step: the host's cores over the engines busy now (this
        one included). An engine that is computing already also counts those idle for less than
        ``QUIET_MS`` (their next request may be on its way); one ``starting`` does not (the cores
        of an engine that has just finished are its to take)."""
        now = self._clock_ms()
        own = self._slot // SLOT_BYTES
        quiet = 0 if starting else QUIET_MS
        busy = 1 + sum(
            1
            for i, value in enumerate(struct.unpack_from(f"<{HOST_SLOTS}q", self._map))
            if i != own and value and now - (value >> 1) < (STALE_MS if value & 1 else quiet)
        )
        return share(self.cores, busy)

    def shards(self) -> list[str]:
        """The shards whose engines share this host's cores (this one included), by slot: each
        stamped its slot when it started and has not closed it (one killed since still shows)."""
        values = struct.unpack_from(f"<{HOST_SLOTS}q", self._map)
        return [shard_of(i) for i, value in enumerate(values) if value]

    def close(self) -> None:
        with self._lock:
            self._busy.clear()
            struct.pack_into("<q", self._map, self._slot, 0)
            self._map.close()
