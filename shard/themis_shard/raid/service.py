"""RaidService: ingest, assembly, rebuild and scrub of one shard's model units (the I/O edge).

Start-up (``prepare``, awaited by the app before the LLM engine exists):

1. If a peer (or this shard) already holds the cluster's manifest, the cluster copy is the
   authority: the shard repairs its own missing/corrupt units from the surviving units + parity
   and assembles the model from its peers — never from the original source, so a loss beyond
   the layout's tolerance fails loudly instead of being papered over by a re-download.
2. Otherwise the cluster is new: the shard stripes the source itself (deterministic, so every
   shard derives the same manifest and exactly its own units) and keeps the file it read.

The assembled file's sha256 is checked against the manifest before it is handed to the engine.
Peers are called through the shard's RemoteExecutor (breakers, timeouts, typed errors).

Why one ~750-line module: ingest, verify, rebuild and assembly are phases of one state machine
over one unit store and one progress record; the pure parts (layout, parity, striping,
manifests) and the edges (files, progress/metrics) live in their own modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry

from ..errors import ThemisError
from .files import check_gguf, copy_file, pwrite_all
from .layout import RaidLayout, UnitRef
from .manifest import Manifest, ManifestError
from .parity import NotEnoughUnits, array_module, crc32
from .progress import Progress, RaidMetrics, RateLimit
from .settings import RaidSettings
from .store import UnitError, UnitStore
from .striping import codec_for, sha256_file, stripe_file

log = logging.getLogger(__name__)


class RaidUnrecoverable(ThemisError):
    """More units of a stripe are lost than the layout tolerates: the model cannot be rebuilt."""

    status, code = 503, "raid_beyond_tolerance"


class RaidUnavailable(ThemisError):
    status, code = 503, "raid_unavailable"


class RaidService:
    def __init__(
        self,
        settings: RaidSettings,
        self_id: str,
        store: UnitStore,
        executor: Any,
        topology: Callable[[], Any],
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.self_id = self_id
        self.store = store
        self.executor = executor
        self._topology = topology
        self.metrics = RaidMetrics(registry or CollectorRegistry())
        self.progress = Progress()
        self.last_scan: dict[str, Any] = {}
        self.model_path: Path | None = None
        #: Where this process got its units at start: "local" volume, "cluster" (rebuilt from
        #: peers), or "source" (striped from the model source: a new cluster).
        self.origin: str | None = None
        self.error: str | None = None
        self._tasks: list[asyncio.Task] = []
        self._lock = asyncio.Lock()  # one rebuild/assembly/ingest at a time
        self._repair_soon = asyncio.Event()
        #: numpy, or cupy when parity runs on the GPU: decided once, at start.
        self.xp = array_module(prefer_gpu=settings.parity_device == "auto")

    @classmethod
    def for_shard(
        cls, data_dir: Path, shard_id: str, cluster: Any, registry: Any, settings: RaidSettings | None = None
    ) -> RaidService:
        """The service for one shard: its units under ``data_dir``, peers through ``cluster``."""
        settings = settings or RaidSettings()
        store = UnitStore(settings.weights_path(data_dir))
        return cls(settings, shard_id, store, cluster.executor, lambda: cluster.topology, registry)

    # -- layout -------------------------------------------------------------------------------------
    def layout(self) -> RaidLayout:
        plan = self._topology().plan
        return RaidLayout.build(plan.raid_mode, plan.ring_spec.shards, self.settings, copies=plan.copies)

    def peers(self, manifest: Manifest | None = None) -> list[str]:
        shards = manifest.shards if manifest else self._topology().members
        return [s for s in shards if s != self.self_id]

    # -- lifecycle ----------------------------------------------------------------------------------
    async def prepare(self, source: str, *, assemble: bool = True) -> Path | None:
        """Make this shard's units whole and (when ``assemble``) return the verified model file.

        Once the cluster has *formed* (every shard held all its units of the model at least once)
        the cluster copy is the only authority: a wiped shard rebuilds from its peers and never
        re-reads the source. Before that — a cluster still starting — the source is used.
        """
        manifest = self.store.active()
        if manifest is None:
            states = await self._peer_states()
            formed = [st for st in states.values() if st.get("formed")]
            if formed:
                manifest = await self._peer_manifest(next(p for p, st in states.items() if st.get("formed")))
                if manifest is None:
                    raise RaidUnavailable(
                        "the formed cluster's manifest could not be read", code="no_manifest"
                    )
                self.store.save_manifest(manifest)
                self.store.mark_formed(manifest.key)
                self.origin = "cluster"
                log.info("raid: replacing a shard of formed model %s: rebuilding from peers", manifest.key)
            else:
                if not states and self.peers():
                    # A new cluster starting (nobody serves yet) looks like this — and so does a shard
                    # that lost its volume while every peer was down. Say so loudly.
                    log.warning(
                        "raid: no peer answered; striping %s from the source. If this cluster had "
                        "already formed, this shard's units come from the source, not from parity.",
                        source or "bundled",
                    )
                self.origin = "source"
                manifest = await self.ingest_local(source, keep_file=assemble)
                other = {st["key"] for st in states.values() if st.get("key")} - {manifest.key}
                if other:
                    raise RaidUnavailable(
                        f"peers hold model(s) {sorted(other)} but this shard's source "
                        f"gives {manifest.key}: check THEMIS_RAID_SOURCE / unit size "
                        "on every shard",
                        code="manifest_conflict",
                    )
                self.store.set_active(manifest.key)
                self.model_path = self.store.model_path(manifest.key) if assemble else None
                return self.model_path
        else:
            self.origin = "local"
        await self.sync(manifest, assemble=assemble, wait=True)
        self.store.set_active(manifest.key)
        self.model_path = self.store.model_path(manifest.key) if assemble else None
        return self.model_path

    def local_state(self) -> dict:
        """What peers ask before deciding whether to rebuild from us (``/internal/raid/state``)."""
        key = self.store.active_key
        scan = self.last_scan
        complete = bool(key and scan.get("key") == key and scan.get("ok") == scan.get("expected"))
        return {
            "shard_id": self.self_id,
            "key": key,
            "complete": complete,
            "formed": bool(key and self.store.is_formed(key)),
        }

    async def _peer_states(self, manifest: Manifest | None = None) -> dict[str, dict]:
        from ..cluster.transport.remote import PeerError, PeerUnavailable

        async def ask(peer: str) -> dict | None:
            try:
                return await self.executor.request(
                    peer, "GET", "/internal/raid/state", retries=0, timeout_s=5
                )
            except (PeerUnavailable, PeerError):
                return None

        peers = self.peers(manifest)
        answers = await asyncio.gather(*(ask(p) for p in peers))
        return {p: a for p, a in zip(peers, answers, strict=True) if isinstance(a, dict)}

    async def _form_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            with contextlib.suppress(Exception):
                await self.check_formed()

    async def check_formed(self) -> bool:
        """Mark the active model formed once every shard of its layout reports it complete."""
        manifest = self.store.active()
        if manifest is None:
            return False
        if self.store.is_formed(manifest.key):
            return True
        states = await self._peer_states(manifest)
        if any(st.get("formed") and st.get("key") == manifest.key for st in states.values()) or (
            self.local_state()["complete"]
            and len(states) == len(manifest.shards) - 1
            and all(st.get("key") == manifest.key and st.get("complete") for st in states.values())
        ):
            self.store.mark_formed(manifest.key)
            log.info("raid: model %s formed on all %d shards", manifest.key, len(manifest.shards))
            return True
        return False

    async def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._scrub_loop(), name="raid-scrub"))
        self._tasks.append(asyncio.create_task(self._form_loop(), name="raid-form"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    def request_repair(self) -> None:
        self._repair_soon.set()

    async def _scrub_loop(self) -> None:
        interval = self.settings.scrub_interval_s
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._repair_soon.wait(), timeout=interval or None)
            self._repair_soon.clear()
            manifest = self.store.active()
            if manifest is None:
                continue
            try:
                report = await self.verify(manifest)
                if report["missing"] or report["corrupt"]:
                    await self.sync(manifest, assemble=False)
                    await self.verify(manifest)
            except Exception as exc:
                log.error("raid scrub/repair failed: %s", exc)

    # -- manifests ----------------------------------------------------------------------------------
    async def _peer_manifest(self, peer: str) -> Manifest | None:
        from ..cluster.transport.remote import PeerError, PeerUnavailable

        try:
            raw = await self.executor.request(
                peer, "GET", "/internal/raid/manifest", expect="bytes", retries=0, timeout_s=5
            )
        except (PeerUnavailable, PeerError):
            return None
        try:
            return Manifest.parse(raw)
        except ManifestError as exc:
            log.error("peer %s sent an invalid manifest: %s", peer, exc)
            return None

    # -- ingest -------------------------------------------------------------------------------------
    async def resolve_source(self, source: str) -> tuple[Path, str, bool]:
        """(local file, model name, temporary?) for "bundled", a path, or an http(s) URL."""
        if source in ("", "bundled"):
            from ..llm.model import bundled_model_path

            path = await asyncio.to_thread(bundled_model_path)
            return path, path.name, False
        if source.startswith(("http://", "https://")):
            path = await self._download(source)
            try:
                check_gguf(path, source)
            except ThemisError:
                path.unlink(missing_ok=True)
                raise
            return path, source.rsplit("/", 1)[-1] or "model.gguf", True
        path = Path(source).expanduser()
        if not path.is_file():
            raise RaidUnavailable(f"model source not found: {source}", code="source_not_found")
        check_gguf(path, source)
        return path, path.name, False

    async def _download(self, url: str) -> Path:
        import httpx

        target = self.store.root / "incoming" / f"{os.getpid()}-{time.time_ns()}.part"
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            timeout = httpx.Timeout(60, connect=10)
            async with (
                httpx.AsyncClient(timeout=timeout, follow_redirects=True) as client,
                client.stream("GET", url) as resp,
            ):
                if resp.status_code != 200:
                    raise RaidUnavailable(
                        f"download of {url} failed: HTTP {resp.status_code}", code="source_unavailable"
                    )
                with open(target, "wb") as f:
                    async for chunk in resp.aiter_bytes(1 << 20):
                        await asyncio.to_thread(f.write, chunk)
        except httpx.HTTPError as exc:
            target.unlink(missing_ok=True)
            raise RaidUnavailable(f"download of {url} failed: {exc}", code="source_unavailable") from exc
        return target

    async def ingest_local(self, source: str, *, keep_file: bool = True) -> Manifest:
        """Stripe the source here, keeping only this shard's units (and a copy of the file)."""
        async with self._lock:
            path, name, temporary = await self.resolve_source(source)
            layout = self.layout()
            progress = self._begin("ingest", layout.stripes(path.stat().st_size))
            started = time.monotonic()
            key_dir = self.store.root / "units" / ".ingest"
            try:
                manifest = await asyncio.to_thread(self._stripe_here, path, layout, name, key_dir, progress)
                if keep_file:
                    target = self.store.model_path(manifest.key)
                    if temporary:
                        os.replace(path, target)
                    else:
                        await asyncio.to_thread(copy_file, path, target)
                    await self._verify_model(manifest, target)
            except Exception as exc:
                self._fail(progress, exc)
                raise
            finally:
                if temporary:
                    path.unlink(missing_ok=True)
            self._finish(progress, started)
            log.info(
                "raid: striped %s (%d bytes) into %d stripes, %s, key %s",
                name,
                manifest.size,
                manifest.stripes,
                layout.mode,
                manifest.key,
            )
            return manifest

    def _stripe_here(
        self, path: Path, layout: RaidLayout, name: str, staging: Path, progress: Progress
    ) -> Manifest:
        """Runs in a thread: units go to a staging dir until the manifest (their key) is known."""
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)

        def keep(stripe) -> None:
            for u, unit in enumerate(stripe.units):
                if layout.shard_of(stripe.index, u) == self.self_id:
                    unit.tofile(staging / f"{stripe.index}.{u}")
            progress.stripes_done += 1

        manifest = stripe_file(path, layout, name, keep, self.xp)
        final = self.store.root / "units" / manifest.key
        shutil.rmtree(final, ignore_errors=True)
        os.replace(staging, final)
        self.store.save_manifest(manifest)
        return manifest

    async def ingest(self, source: str, *, activate: bool = False) -> Manifest:
        """Stripe a model and place every unit on its shard (``PUT /internal/raid/units/...``).

        All shards of the layout must be reachable. Two passes over the file: the first computes
        the manifest (every unit's crc), which each shard then uses to check the units it receives.
        """
        async with self._lock:
            path, name, temporary = await self.resolve_source(source)
            try:
                layout = self.layout()
                manifest = await asyncio.to_thread(stripe_file, path, layout, name, None, self.xp)
                body = manifest.canonical()
                self.store.save_manifest(manifest)
                for peer in self.peers(manifest):
                    await self.executor.request(
                        peer,
                        "PUT",
                        f"/internal/raid/manifests/{manifest.key}",
                        content=body,
                        headers={"content-type": "application/json"},
                        expect="none",
                        timeout_s=30,
                    )
                progress = self._begin("ingest", manifest.stripes)
                started = time.monotonic()
                await self._place_units(path, manifest, progress)
                if activate:
                    for peer in self.peers(manifest):
                        await self.executor.request(
                            peer, "PUT", f"/internal/raid/active/{manifest.key}", expect="none", timeout_s=30
                        )
                    self.store.set_active(manifest.key)
                self._finish(progress, started)
                return manifest
            except ThemisError:
                raise
            except Exception as exc:
                from ..cluster.transport.remote import RemoteCallError

                if isinstance(exc, RemoteCallError):
                    raise RaidUnavailable(f"ingest needs every shard of the layout: {exc}") from exc
                raise
            finally:
                if temporary:
                    path.unlink(missing_ok=True)

    async def _place_units(self, path: Path, manifest: Manifest, progress: Progress) -> None:
        layout = manifest.layout
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue(maxsize=2)

        stop = threading.Event()

        def put(item) -> bool:
            while not stop.is_set():
                try:
                    asyncio.run_coroutine_threadsafe(asyncio.wait_for(queue.put(item), 1.0), loop).result()
                    return True
                except TimeoutError:
                    continue
            return False

        def produce() -> None:
            from .striping import iter_stripes

            try:
                with path.open("rb") as f:
                    for stripe in iter_stripes(f, layout, manifest.size):
                        # the reader reuses its buffers: copy before handing the units over
                        if not put((stripe.index, [u.tobytes() for u in stripe.units])):
                            return
            finally:
                put(None)  # the sender stops even when reading failed (the error surfaces below)

        producer = loop.run_in_executor(None, produce)
        try:
            await self._send_units(manifest, queue, progress)
        finally:
            stop.set()
            await producer

    async def _send_units(self, manifest: Manifest, queue: asyncio.Queue, progress: Progress) -> None:
        layout = manifest.layout
        limit = RateLimit(self.settings.rebuild_rate_limit_mb_s)
        while (item := await queue.get()) is not None:
            s, units = item
            sends = []
            for u, data in enumerate(units):
                owner = layout.shard_of(s, u)
                ref = UnitRef(s, u)
                if owner == self.self_id:
                    unit = np.frombuffer(data, np.uint8)
                    await asyncio.to_thread(self.store.write_unit, manifest, ref, unit)
                else:
                    sends.append(
                        self.executor.request(
                            owner,
                            "PUT",
                            f"/internal/raid/units/{manifest.key}/{s}/{u}",
                            content=data,
                            headers={"content-type": "application/octet-stream"},
                            expect="none",
                            timeout_s=60,
                        )
                    )
            await asyncio.gather(*sends)
            sent = sum(len(d) for d in units)
            self.metrics.transferred.labels(op="ingest").inc(sent)
            progress.bytes_transferred += sent
            progress.stripes_done += 1
            await limit.account(sent)

    # -- verify -------------------------------------------------------------------------------------
    async def verify(self, manifest: Manifest | None = None) -> dict:
        """crc-check every unit this shard should hold; the result also feeds status and metrics."""
        manifest = manifest or self.store.active()
        if manifest is None:
            raise RaidUnavailable("no RAID model on this shard", code="no_model")
        started = time.monotonic()
        refs = manifest.layout.units_on(self.self_id, manifest.size)

        def scan() -> dict:
            states: dict[str, list[str]] = {"ok": [], "missing": [], "corrupt": []}
            for ref in refs:
                states[self.store.unit_state(manifest, ref)].append(str(ref))
            return states

        states = await asyncio.to_thread(scan)
        if states["corrupt"]:
            self.metrics.corrupt.inc(len(states["corrupt"]))
            log.warning(
                "raid: %d corrupt unit(s) on %s: %s",
                len(states["corrupt"]),
                self.self_id,
                states["corrupt"][:10],
            )
        for state, units in states.items():
            self.metrics.units.labels(state=state).set(len(units))
        self.metrics.duration.labels(op="verify").observe(time.monotonic() - started)
        self.last_scan = {
            "key": manifest.key,
            "at": time.time(),
            "expected": len(refs),
            **{k: len(v) for k, v in states.items()},
            "bad_units": (states["missing"] + states["corrupt"])[:100],
        }
        return self.last_scan

    # -- rebuild and assembly -----------------------------------------------------------------------
    async def sync(self, manifest: Manifest, *, assemble: bool, wait: bool = False) -> dict:
        """Repair this shard's missing/corrupt units and (``assemble``) write the verified model file.

        ``wait``: peers that cannot be reached are waited for (up to ``startup_timeout_s``); a unit
        that is gone on a live peer beyond the tolerance fails at once with RaidUnrecoverable.
        """
        deadline = time.monotonic() + self.settings.startup_timeout_s
        while True:
            try:
                return await self._sync_once(manifest, assemble)
            except _PeersDown as exc:
                if not wait or time.monotonic() > deadline:
                    raise RaidUnrecoverable(str(exc)) from None
                log.warning("raid: waiting for peers to rebuild from: %s", exc)
                await asyncio.sleep(1.0)

    async def _sync_once(self, manifest: Manifest, assemble: bool) -> dict:
        async with self._lock:
            layout = manifest.layout
            target = self.store.model_path(manifest.key)
            if assemble and target.exists():
                if await asyncio.to_thread(sha256_file, target) == manifest.sha256:
                    assemble = False  # already whole: only the units may need repair
                else:
                    log.warning("raid: assembled model %s fails its sha256; reassembling", target.name)
                    target.unlink()
            op = "assemble" if assemble else "rebuild"
            progress = self._begin(op, manifest.stripes)
            started = time.monotonic()
            part = target.with_suffix(".part")
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if assemble else None
            limit = RateLimit(self.settings.rebuild_rate_limit_mb_s)
            todo: asyncio.Queue[int] = asyncio.Queue()
            mine = {ref.stripe for ref in layout.units_on(self.self_id, manifest.size)}
            for s in range(manifest.stripes):
                if assemble or s in mine:
                    todo.put_nowait(s)
            progress.stripes_total = todo.qsize()
            lost: list[str] = []
            down: list[str] = []

            async def worker() -> None:
                codec = codec_for(layout, self.xp)  # one per worker: the XOR output buffer is reused
                while True:
                    try:
                        s = todo.get_nowait()
                    except asyncio.QueueEmpty:
                        return
                    try:
                        n = await self._sync_stripe(manifest, s, codec, fd, progress)
                    except _StripeLost as exc:
                        (down if exc.peers_down else lost).append(str(exc))
                        continue
                    progress.stripes_done += 1
                    ratio = progress.stripes_done / max(progress.stripes_total, 1)
                    self.metrics.progress.labels(op=op).set(ratio)
                    await limit.account(n)

            try:
                await asyncio.gather(*(worker() for _ in range(self.settings.parallel_stripes)))
                if lost or down:
                    self.metrics.lost.set(len(lost) + len(down))
                    summary = (
                        f"{len(lost) + len(down)} stripe(s) of {manifest.name} cannot be rebuilt "
                        f"({layout.mode} tolerates {layout.tolerance} lost shard(s)): "
                        f"{(lost + down)[0]}"
                    )
                    if lost:
                        raise RaidUnrecoverable(summary)
                    raise _PeersDown(summary)
                self.metrics.lost.set(0)
                if fd is not None:
                    os.ftruncate(fd, manifest.size)
                    os.fsync(fd)
                    os.close(fd)
                    fd = None
                    await self._verify_model(manifest, part)
                    os.replace(part, target)
            except BaseException as exc:
                if fd is not None:
                    os.close(fd)
                part.unlink(missing_ok=True)
                self._fail(progress, exc)
                raise
            self._finish(progress, started)
            log.info(
                "raid: %s of %s done: %d unit(s) repaired, %d bytes fetched in %.2fs",
                op,
                manifest.name,
                progress.units_repaired,
                progress.bytes_transferred,
                time.monotonic() - started,
            )
            return progress.as_dict()

    async def _sync_stripe(
        self, manifest: Manifest, s: int, codec: Any, fd: int | None, progress: Progress
    ) -> int:
        """Read (local or peer), reconstruct and write back one stripe; returns bytes fetched."""
        from ..cluster.transport.remote import PeerError, PeerUnavailable

        layout = manifest.layout
        have: dict[int, np.ndarray] = {}
        broken: dict[int, str] = {}
        own = [u for u in range(layout.width) if layout.shard_of(s, u) == self.self_id]
        for u in own:
            try:
                have[u] = await asyncio.to_thread(self.store.read_unit, manifest, UnitRef(s, u))
            except UnitError as exc:
                broken[u] = exc.reason
                if exc.reason == "corrupt":
                    self.metrics.corrupt.inc()
        need = set(broken) | (set(range(layout.k)) if fd is not None else set())
        fetched = 0
        unreachable: set[int] = set()

        async def fetch(u: int) -> None:
            nonlocal fetched
            peer = layout.shard_of(s, u)
            try:
                raw = await self.executor.request(
                    peer,
                    "GET",
                    f"/internal/raid/units/{manifest.key}/{s}/{u}",
                    expect="bytes",
                    retries=1,
                    timeout_s=60,
                )
            except PeerUnavailable:
                broken[u] = f"{peer} unreachable"
                unreachable.add(u)
                return
            except PeerError as exc:
                broken[u] = f"{exc.code} on {peer}"
                return
            data = np.frombuffer(raw, dtype=np.uint8)
            if data.size != manifest.unit_size or crc32(data) != manifest.crc(s, u):
                broken[u] = f"corrupt in transit from {peer}"
                return
            fetched += data.size
            have[u] = data

        direct = [u for u in need if u not in have and u not in broken]
        await asyncio.gather(*(fetch(u) for u in direct))
        missing = need - have.keys()
        if missing:
            # Survivors: redundancy first (data units already failed or are what we need).
            extra = sorted(
                (u for u in range(layout.width) if u not in have and u not in broken),
                key=lambda u: (u < layout.k, u),
            )
            while len(have) < layout.k and extra:
                batch, extra = extra[: layout.k - len(have)], extra[layout.k - len(have) :]
                await asyncio.gather(*(fetch(u) for u in batch))
            if len(have) < layout.k:
                # Worth waiting only if the unreachable peers coming back would be enough.
                peers_down = len(have) + len(unreachable) >= layout.k
                detail = ", ".join(
                    f"unit {u} ({layout.shard_of(s, u)}): {why}" for u, why in sorted(broken.items())
                )
                raise _StripeLost(
                    f"stripe {s}: {len(have)} of {layout.k} needed units readable; {detail}", peers_down
                )
            try:
                rebuilt = await asyncio.to_thread(codec.reconstruct, have, sorted(missing))
            except NotEnoughUnits as exc:
                raise _StripeLost(f"stripe {s}: {exc}", False) from None
            for u in sorted(missing):
                if u in own:
                    await asyncio.to_thread(self.store.write_unit, manifest, UnitRef(s, u), rebuilt[u])
                    progress.units_repaired += 1
                    self.metrics.repaired.inc()
                    log.info("raid: rebuilt unit %d/%d of %s (%s)", s, u, manifest.name, broken.get(u))
            have.update(rebuilt)
        if fd is not None:
            start = s * layout.stripe_bytes
            await asyncio.to_thread(pwrite_all, fd, [have[u] for u in range(layout.k)], start)
        progress.bytes_transferred += fetched
        self.metrics.transferred.labels(op="assemble" if fd is not None else "rebuild").inc(fetched)
        return fetched

    async def _verify_model(self, manifest: Manifest, path: Path) -> None:
        digest = await asyncio.to_thread(sha256_file, path)
        if digest != manifest.sha256 or path.stat().st_size != manifest.size:
            path.unlink(missing_ok=True)
            raise RaidUnrecoverable(
                f"assembled {manifest.name} fails verification: sha256 {digest[:16]}… "
                f"!= manifest {manifest.sha256[:16]}…; not loading it",
                code="model_verification_failed",
            )

    # -- progress -----------------------------------------------------------------------------------
    def _begin(self, op: str, total: int) -> Progress:
        self.progress = Progress(op=op, state="running", stripes_total=total, started_at=time.time())
        self.metrics.progress.labels(op=op).set(0)
        return self.progress

    def _finish(self, progress: Progress, started: float) -> None:
        progress.state = "done"
        progress.finished_at = time.time()
        elapsed = time.monotonic() - started
        self.metrics.duration.labels(op=progress.op).observe(elapsed)
        self.metrics.progress.labels(op=progress.op).set(1)
        self.metrics.rate.labels(op=progress.op).set(progress.bytes_transferred / max(elapsed, 1e-9))
        self.error = None

    def _fail(self, progress: Progress, exc: BaseException) -> None:
        progress.state = "failed"
        progress.finished_at = time.time()
        progress.error = str(exc) or type(exc).__name__
        self.error = progress.error

    def status(self) -> dict:
        manifest = self.store.active()
        try:
            layout = self.layout().describe()
        except ValueError as exc:
            layout = {"error": str(exc)}
        return {
            "enabled": True,
            "shard_id": self.self_id,
            "layout": layout,
            "formed": bool(manifest and self.store.is_formed(manifest.key)),
            "origin": self.origin,
            "model": manifest.summary() if manifest else None,
            "model_path": str(self.model_path) if self.model_path else None,
            "units": self.last_scan,
            "operation": self.progress.as_dict(),
            "error": self.error,
            "degraded": bool(self.last_scan.get("missing") or self.last_scan.get("corrupt")),
        }


class _StripeLost(Exception):
    def __init__(self, message: str, peers_down: bool) -> None:
        super().__init__(message)
        self.peers_down = peers_down


class _PeersDown(Exception):
    """Not enough peers answer right now (they may come back)."""


async def start_raid(
    data_dir: Path,
    shard_id: str,
    cluster: Any,
    registry: Any,
    source: str,
    *,
    assemble: bool,
    use_gpu: bool | None = None,
) -> tuple[RaidService | None, Path | None]:
    """(service, verified model path) when THEMIS_RAID_ENABLED, else (None, None).
    ``use_gpu=False`` (THEMIS_USE_GPU=false) keeps parity on the CPU whatever the RAID setting."""
    settings = RaidSettings()
    if use_gpu is False:
        settings = settings.model_copy(update={"parity_device": "cpu"})
    if not settings.enabled:
        return None, None
    service = RaidService.for_shard(data_dir, shard_id, cluster, registry, settings)
    path = await service.prepare(settings.source or source, assemble=assemble)
    await service.verify()
    await service.start()
    return service, path
