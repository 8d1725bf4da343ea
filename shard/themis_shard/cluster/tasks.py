"""Background tasks of one part of the cluster service, started and cancelled together.

Each part owns its own ``Tasks`` so that stopping the shard cancels everything a part spawned
(including tasks spawned later, e.g. a handoff started by a plan change) without the parts
sharing a list.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


async def every(seconds: float, job: Callable[[], Awaitable[Any]]) -> None:
    """Run ``job`` forever, ``seconds`` apart; a failing run is logged and the loop goes on."""
    while True:
        try:
            await job()
        except Exception:
            log.exception("background job %s failed", getattr(job, "__name__", job))
        await asyncio.sleep(seconds)


class Tasks:
    def __init__(self) -> None:
        self._tasks: list[asyncio.Task] = []

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
        task = asyncio.create_task(coro, name=name)
        self._tasks.append(task)
        return task

    def add(self, task: asyncio.Task) -> None:
        self._tasks.append(task)

    def every(self, seconds: float, job: Callable[[], Awaitable[Any]], name: str) -> asyncio.Task:
        return self.spawn(every(seconds, job), name)

    async def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
