"""What the ``themis`` CLI shows during long work (rich): shard start-up as a live table, keys
moved during a reshard with an ETA, RAID rebuild progress per shard, a backup's bytes.

The views only render what they are given; polling stays in the commands. They write to the
console they are handed (stderr in the CLI, so stdout stays machine-readable; a recording
console in tests). The sums they show are pure functions, tested on their own.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Mapping

from rich.console import Console
from rich.live import Live
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from themis_core.plan import ClusterPlan
from themis_core.ring import HashRing


def moved_fraction(old: ClusterPlan, new: ClusterPlan, samples: int = 4096, seed: int = 0) -> float:
    """Share of stored copies that change shard between two rings: for each sampled key, the new
    owners it did not have before, over the copies it has. Times the stored copies, it gives the
    keys a reshard moves (the shards pull them; no shard knows the total in advance)."""
    before, after = HashRing.build(old.ring_spec), HashRing.build(new.ring_spec)
    rng = random.Random(seed)
    copies, moved = 0, 0
    for _ in range(samples):
        key = f"c{rng.randrange(1 << 30)}/{rng.randrange(1 << 30)}"
        was = set(before.owners(key, old.copies))
        now = after.owners(key, new.copies)
        copies += len(was)
        moved += sum(1 for s in now if s not in was)
    return moved / copies if copies else 0.0


def migration_summary(statuses: Mapping[str, dict | None], version: int) -> tuple[int, dict[str, str]]:
    """Keys received so far for ring ``version`` across members, and each member's state
    (``behind`` while it has not adopted the version, ``unreachable`` when it did not answer)."""
    moved, states = 0, {}
    for shard, status in statuses.items():
        m = (status or {}).get("migration") if status else None
        if not m:
            states[shard] = "unreachable"
            continue
        if (m.get("ring_version") or 0) < version:
            states[shard] = "behind"
            continue
        states[shard] = m.get("state", "?")
        moved += int(m.get("keys_received", 0))
    return moved, states


class ScaleView:
    """``moved / total`` keys with a bar, rate and ETA; the total is an estimate (``≈``) and grows
    if more keys arrive than estimated."""

    def __init__(
        self, console: Console, total: int, description: str, names: Mapping[str, str] | None = None
    ) -> None:
        """``names``: member URL → shard id, for the per-shard states."""
        self.total = max(total, 1)
        self.names = dict(names or {})
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("keys"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[states]}"),
            console=console,
            transient=False,
        )
        self.task: TaskID = self.progress.add_task(description, total=self.total, states="")

    def __enter__(self) -> ScaleView:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, moved: int, states: Mapping[str, str], done: bool = False) -> None:
        if moved > self.total:
            self.total = moved
        if done:
            self.total = max(moved, 1)
        named = {self.names.get(k, k): st for k, st in states.items()}
        summary = " ".join(f"{s}={st}" for s, st in sorted(named.items()))
        self.progress.update(
            self.task, completed=self.total if done else moved, total=self.total, states=summary
        )


class StartupView:
    """One row per shard: starting → ready (with the seconds it took) or exited."""

    def __init__(self, console: Console, shards: Iterable[tuple[str, str]]) -> None:
        self.rows = {sid: {"url": url, "state": "starting", "seconds": None} for sid, url in shards}
        self.started = time.monotonic()
        self.live = Live(self._table(), console=console, transient=False, auto_refresh=False)

    def _table(self) -> Table:
        table = Table("shard", "url", "state", "ready after", title="themis up")
        for sid, row in self.rows.items():
            colour = {"ready": "green", "exited": "red"}.get(row["state"], "yellow")
            took = f"{row['seconds']:.1f}s" if row["seconds"] is not None else "-"
            table.add_row(sid, row["url"], f"[{colour}]{row['state']}[/]", took)
        return table

    def mark(self, shard_id: str, state: str) -> None:
        row = self.rows[shard_id]
        if row["state"] != state:
            row["state"] = state
            if state == "ready":
                row["seconds"] = time.monotonic() - self.started
            self.live.update(self._table(), refresh=True)

    def __enter__(self) -> StartupView:
        self.live.start(refresh=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.update(self._table(), refresh=True)
        self.live.stop()


class RebuildView:
    """One bar per shard: stripes rebuilt of the rebuild's total (``/v1/raid/status`` operation)."""

    def __init__(self, console: Console, shard_ids: Iterable[str]) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("stripes {task.fields[rate]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self.tasks = {sid: self.progress.add_task(f"{sid} rebuild", total=None, rate="") for sid in shard_ids}

    def update(self, shard_id: str, operation: Mapping) -> None:
        total = operation.get("stripes_total") or None
        rate = operation.get("rate_bytes_per_s") or 0
        self.progress.update(
            self.tasks[shard_id],
            total=total,
            completed=operation.get("stripes_done", 0),
            rate=f"{rate / 1e6:.1f} MB/s" if rate else "",
        )

    def __enter__(self) -> RebuildView:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()


class TransferView:
    """One bar of bytes (a backup's copy, a backup's check): done of total, rate and ETA."""

    def __init__(self, console: Console, description: str) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self.task: TaskID = self.progress.add_task(description, total=None)

    def update(self, done: int, total: int | None, description: str | None = None) -> None:
        fields = {"description": description} if description else {}
        self.progress.update(self.task, completed=done, total=total, **fields)

    def __enter__(self) -> TransferView:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
