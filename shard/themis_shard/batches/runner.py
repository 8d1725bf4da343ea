"""Runs the batches this shard coordinates, and resumes them after a restart.

Every shard runs one ``BatchRunner``. Each poll it looks at the batch documents it holds (its
own replicas, so a shard that restarts finds its batches on its disk) and takes those still
active whose primary it is in the current plan: one coordinator per batch, and when a failover
moves the primary, the new one picks the batch up. A batch runs in waves of ``concurrency``
lines, one wave at a time on this shard across all its batches; each line's result is written
as its own document the moment it is known, and a resumed batch runs only the lines without
one, so the output holds every line exactly once.

Cancelling, expiry and the end all go through ``finish``: the output and error files are
written from the stored results (under ids derived from the batch id, so a coordinator that
dies while finalizing writes the same files again), then the batch's end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..errors import ThemisError
from ..storage.documents import DocumentStore
from . import model
from .dispatch import Answer, LineDispatcher
from .model import InputLine, Status
from .settings import BatchSettings
from .store import BATCHES, BatchStore

log = logging.getLogger(__name__)


def output_file_ids(batch_id: str) -> tuple[str, str]:
    return f"file-{batch_id}-output", f"file-{batch_id}-errors"


def result_line(line: InputLine, answer: Answer) -> dict[str, Any]:
    return model.output_line(
        f"batch_req_{uuid.uuid4().hex[:24]}",
        line.custom_id,
        answer.status_code,
        f"req_{uuid.uuid4().hex}",
        answer.body,
    )


def unanswered(line: InputLine, code: str, message: str) -> dict[str, Any]:
    return model.error_line(f"batch_req_{uuid.uuid4().hex[:24]}", line.custom_id, code, message)


def counts(results: dict[int, dict[str, Any]]) -> tuple[int, int]:
    ok = sum(1 for r in results.values() if model.is_success(r))
    return ok, len(results) - ok


class BatchRunner:
    """``owns(batch_id)``: is this shard the batch's coordinator now; ``ready()``: may this
    shard run lines (its engine loaded, caught up with the cluster)."""

    def __init__(
        self,
        store: BatchStore,
        local: DocumentStore,
        dispatcher: LineDispatcher,
        settings: BatchSettings,
        owns: Callable[[str], bool],
        ready: Callable[[], bool],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._local = local
        self._dispatcher = dispatcher
        self._settings = settings
        self._owns = owns
        self._ready = ready
        self._clock = clock
        self._running: dict[str, asyncio.Task] = {}
        #: One wave at a time on this shard, whatever the number of batches it coordinates:
        #: ``concurrency`` bounds the lines it has in flight, not each batch's.
        self._wave = asyncio.Lock()
        self._wake = asyncio.Event()
        self._loop: asyncio.Task | None = None

    def _now(self) -> int:
        return int(self._clock())

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._loop = asyncio.create_task(self._forever(), name="batch-runner")

    async def stop(self) -> None:
        tasks = [t for t in (self._loop, *self._running.values()) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    def wake(self) -> None:
        """Look for work now (a batch was just created or cancelled here)."""
        self._wake.set()

    async def _forever(self) -> None:
        while True:
            try:
                await self.poll()
            except Exception:
                log.exception("batch runner poll failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._settings.poll_interval_s)
            self._wake.clear()

    def _active_here(self) -> list[str]:
        if not self._local.has_collection(BATCHES):
            return []
        return [d.key for d in self._local.scan(BATCHES) if model.status_of(d.document) in model.ACTIVE]

    async def poll(self) -> None:
        """Start a task for each active batch this shard coordinates and is not yet running."""
        if not self._ready():
            return
        for batch_id in await asyncio.to_thread(self._active_here):
            if batch_id in self._running or not self._owns(batch_id):
                continue
            task = asyncio.create_task(self._run_logged(batch_id), name=f"batch-{batch_id}")
            self._running[batch_id] = task
            task.add_done_callback(lambda _t, b=batch_id: self._running.pop(b, None))

    async def _run_logged(self, batch_id: str) -> None:
        try:
            await self.run(batch_id)
        except ThemisError as exc:  # a store or peer refusal: the next poll tries again
            log.warning("batch %s paused: %s (%s)", batch_id, exc.message, exc.code)
        except Exception:
            log.exception("batch %s paused", batch_id)

    # -- one batch ---------------------------------------------------------------------------
    async def _lines(self, batch: dict[str, Any]) -> list[InputLine] | None:
        """The batch's request lines; a batch whose input cannot be read is failed (None)."""
        try:
            text = (await self._store.content(batch["input_file_id"])).decode()
            return model.parse_input(text, batch["endpoint"], self._settings.max_lines)
        except ThemisError as exc:
            if exc.status >= 500:
                raise
            code, message = exc.code, exc.message
            await self._store.update(batch["id"], lambda b: model.failed(b, code, message, self._now()))
            return None

    async def run(self, batch_id: str) -> None:
        """Run the batch to its end (or until this shard stops coordinating it)."""
        batch = await self._store.batch(batch_id)
        if model.status_of(batch) not in model.ACTIVE:
            return
        lines = await self._lines(batch)
        if lines is None:
            return
        batch = await self._store.update(batch_id, lambda b: model.started(b, len(lines), self._now()))
        results = await self._store.results(batch_id)
        attempts: dict[int, int] = {}

        async def answered(line: InputLine, answer: Answer) -> None:
            entry = result_line(line, answer)
            await self._store.put_result(batch_id, line.index, entry)
            results[line.index] = entry

        while model.status_of(batch) is Status.in_progress and self._owns(batch_id):
            if model.is_expired(batch, self._clock()):
                break
            pending = [line for line in lines if line.index not in results]
            if not pending:
                break
            wave = pending[: self._settings.concurrency]
            async with self._wave:
                missed = await self._dispatcher.run(
                    batch["endpoint"], wave, self._settings.line_timeout_s, answered
                )
            for line in missed:  # no shard could run it: tried again, up to max_attempts
                attempts[line.index] = attempts.get(line.index, 0) + 1
                if attempts[line.index] >= self._settings.max_attempts:
                    entry = unanswered(line, "shard_unavailable", "no shard could run the request")
                    await self._store.put_result(batch_id, line.index, entry)
                    results[line.index] = entry
            completed, failed = counts(results)
            batch = await self._store.update(
                batch_id, lambda b, c=completed, f=failed: model.counted(b, c, f)
            )
        if self._owns(batch_id) and model.status_of(batch) in model.ACTIVE:
            expiring = model.status_of(batch) is Status.in_progress and len(results) < len(lines)
            await self.finish(batch_id, lines, expiring=expiring)

    async def finish(self, batch_id: str, lines: list[InputLine], *, expiring: bool) -> dict[str, Any]:
        """Write the output and error files from the stored results, then the batch's end:
        completed (through finalizing), cancelled, or expired (``expiring``: the window closed
        with lines not run, which the error file names as ``batch_expired``)."""
        if not expiring:
            await self._store.update(batch_id, lambda b: model.finalizing(b, self._now()))
        results = await self._store.results(batch_id)
        late = [
            unanswered(line, "batch_expired", "the 24h completion window closed before this request ran")
            for line in lines
            if expiring and line.index not in results
        ]
        ordered = [results[line.index] for line in lines if line.index in results]
        good = [r for r in ordered if model.is_success(r)]
        bad = [r for r in ordered if not model.is_success(r)] + late
        out_id, err_id = output_file_ids(batch_id)
        now = self._now()
        if good:
            await self._store.put_file(
                out_id, model.jsonl(good), f"{batch_id}_output.jsonl", model.OUTPUT_PURPOSE, now
            )
        if bad:
            await self._store.put_file(
                err_id, model.jsonl(bad), f"{batch_id}_error.jsonl", model.OUTPUT_PURPOSE, now
            )
        files = (out_id if good else None, err_id if bad else None)
        completed, failed = counts(results)

        usage = model.usage_of(ordered)

        def end(b: dict[str, Any]) -> dict[str, Any]:
            b = {**model.counted(b, completed, failed + len(late)), "usage": usage}
            if expiring and model.status_of(b) is Status.in_progress:
                return model.expired(b, *files, now)
            return model.finished(b, *files, now)

        ended = await self._store.update(batch_id, end)
        try:
            await self._store.drop_results(batch_id, sorted(results))
        except ThemisError as exc:  # the batch is done either way; the leftovers are only scanned past
            log.warning("batch %s: per-line results not all deleted: %s", batch_id, exc.message)
        return ended
