"""Back up a whole cluster: gate every shard, snapshot every shard, copy the files (every shard's
at once, one thread each), write the manifest last. Runs wherever the shards' admin API is
reachable (the ``themis`` CLI, the operator); it talks HTTP only, so it needs neither the storage
engine nor the shard's app.

``themis_shard/backup/cut.py`` argues why the snapshots form one consistent cut. Every file is
hashed while it streams from the shard and must match the sha256 the shard listed, so what reaches the
destination is what the shard checkpointed; the manifest, written only after every file, is what
makes the backup exist. The gates are always opened and the staged snapshots always dropped,
whatever fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

from .. import __version__
from .destinations import Destination
from .manifest import Cut, Manifest, ShardSnapshot, check_backup_id, new_backup_id

PREFIX = "/v1/cluster/backups"


class BackupFailed(Exception):
    """The backup did not complete; nothing usable was left at the destination."""


@dataclass(frozen=True)
class ShardTarget:
    shard_id: str
    url: str


@dataclass
class BackupProgress:
    """What a progress bar shows: the phase, then bytes copied of the total."""

    phase: str  # "cut" | "copy" | "done"
    bytes_done: int = 0
    bytes_total: int = 0
    files_done: int = 0
    files_total: int = 0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _error(shard: ShardTarget, response: httpx.Response) -> str:
    try:
        err = response.json()["error"]
        return f"{shard.shard_id}: {response.status_code} {err['code']}: {err['message']}"
    except (ValueError, KeyError, TypeError):
        return f"{shard.shard_id}: {response.status_code} {response.text[:200]}"


class ClusterBackup:
    def __init__(
        self,
        shards: Sequence[ShardTarget],
        destination: Destination,
        client: httpx.Client,
        *,
        lease_s: float = 60.0,
        progress: Callable[[BackupProgress], None] | None = None,
    ) -> None:
        """``client``: carries the admin key and TLS settings; ``lease_s``: how long a gate stays
        closed if this process dies between closing and opening it."""
        if not shards:
            raise ValueError("a backup needs at least one shard")
        self.shards = list(shards)
        self.destination = destination
        self.client = client
        self.lease_s = lease_s
        self.progress = progress or (lambda p: None)
        self._progress_lock = threading.Lock()

    def _call(self, shard: ShardTarget, method: str, path: str, **kw) -> dict:
        try:
            response = self.client.request(method, f"{shard.url}{PREFIX}/{path}", **kw)
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise BackupFailed(f"{shard.shard_id} unreachable: {reason}") from None
        if response.status_code != 200:
            raise BackupFailed(_error(shard, response))
        return response.json()

    def _each(self, fn: Callable[[ShardTarget], object]) -> list:
        with ThreadPoolExecutor(max_workers=min(16, len(self.shards))) as pool:
            futures = [pool.submit(fn, s) for s in self.shards]
            return [f.result() for f in futures]

    def _each_quietly(self, fn: Callable[[ShardTarget], object]) -> None:
        def quiet(s: ShardTarget) -> None:
            # best effort: leases and the next backup clean up after an unreachable shard
            with contextlib.suppress(BackupFailed, httpx.HTTPError):
                fn(s)

        self._each(quiet)

    # -- the cut ---------------------------------------------------------------------------------
    def cut(self, backup_id: str) -> tuple[dict, Cut, list[ShardSnapshot]]:
        """Close every gate, snapshot every shard, open every gate: the plan, the cut and the parts."""
        self.progress(BackupProgress("cut"))
        try:
            lease = {"lease_s": self.lease_s}
            gates = self._each(lambda s: self._call(s, "POST", f"{backup_id}/gate", json=lease))
            closed_ms = _now_ms()
            taken = self._each(lambda s: self._call(s, "POST", f"{backup_id}/snapshot"))
            parts = [ShardSnapshot.model_validate(p) for p in taken]
            snapshot_ms = _now_ms()
            # every gate held from its closing until after the last snapshot, or no cut
            renewed = self._each(lambda s: self._call(s, "POST", f"{backup_id}/gate", json=lease))
        finally:
            self._each_quietly(lambda s: self._call(s, "DELETE", f"{backup_id}/gate"))
        lapsed = [g["shard_id"] for g, r in zip(gates, renewed, strict=True) if g["closing"] != r["closing"]]
        if lapsed:
            raise BackupFailed(
                f"the decision gate of {', '.join(lapsed)} lapsed before every snapshot was taken "
                f"(lease {self.lease_s} s); retry with a longer lease"
            )
        versions = {g["ring_version"] for g in gates} | {p.ring_version for p in parts}
        if len(versions) != 1:
            raise BackupFailed(
                f"the shards changed plan during the backup (ring versions {sorted(versions)}); retry"
            )
        plans = {g["shard_id"]: g["plan"] for g in gates}
        plan = plans[self.shards[0].shard_id]
        members = sorted(m["shard_id"] for m in plan["members"])
        if members != sorted(s.shard_id for s in self.shards):
            reached = [s.shard_id for s in self.shards]
            raise BackupFailed(f"the plan's members are {members}, the backup reached {reached}")
        return plan, Cut(ring_version=versions.pop(), closed_ms=closed_ms, snapshot_ms=snapshot_ms), parts

    # -- copying ---------------------------------------------------------------------------------
    def _copy(
        self, shard: ShardTarget, part: ShardSnapshot, manifest_id: str, tmp: Path, done: BackupProgress
    ) -> None:
        for entry in part.files:
            local = tmp / shard.shard_id
            digest, size = hashlib.sha256(), 0
            try:
                with (
                    self.client.stream("GET", f"{shard.url}{PREFIX}/{manifest_id}/files/{entry.path}") as r,
                    open(local, "wb") as out,
                ):
                    if r.status_code != 200:
                        r.read()
                        raise BackupFailed(_error(shard, r))
                    for chunk in r.iter_bytes(1 << 20):
                        digest.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
            except httpx.HTTPError as exc:
                raise BackupFailed(f"{shard.shard_id}: copying {entry.path} failed: {exc}") from None
            if size != entry.size or digest.hexdigest() != entry.sha256:
                raise BackupFailed(
                    f"{shard.shard_id}: {entry.path} arrived with other bytes than the shard listed"
                )
            self.destination.put_file(f"{manifest_id}/shards/{shard.shard_id}/{entry.path}", local)
            with self._progress_lock:  # the shards copy in parallel: one report at a time
                done.bytes_done += entry.size
                done.files_done += 1
                self.progress(done)

    def run(self, backup_id: str | None = None) -> Manifest:
        backup_id = check_backup_id(backup_id or new_backup_id())
        if backup_id in self.destination.backups():
            raise BackupFailed(f"{self.destination.url} already holds a backup {backup_id}")
        try:
            plan, cut, parts = self.cut(backup_id)
            by_id = {p.shard_id: p for p in parts}
            progress = BackupProgress(
                "copy",
                bytes_total=sum(p.size for p in parts),
                files_total=sum(len(p.files) for p in parts),
            )
            self.progress(progress)
            with tempfile.TemporaryDirectory(prefix="themis-backup-") as tmp:
                # every shard at once: each serves, and this side hashes, its own files
                self._each(lambda s: self._copy(s, by_id[s.shard_id], backup_id, Path(tmp), progress))
            manifest = Manifest(
                backup_id=backup_id,
                cluster=str(plan.get("cluster", "")),
                created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                themis_version=__version__,
                plan=plan,
                cut=cut,
                shards=tuple(by_id[s.shard_id] for s in self.shards),
            )
            self.destination.put_bytes(f"{backup_id}/manifest.json", manifest.to_bytes())
            progress.phase = "done"
            self.progress(progress)
            return manifest
        except BaseException:
            with contextlib.suppress(Exception):  # no manifest was written: never a usable backup
                self.destination.delete(backup_id)
            raise
        finally:
            self._each_quietly(lambda s: self._call(s, "DELETE", backup_id))
