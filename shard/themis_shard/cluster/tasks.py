"""Background tasks of one part of the cluster service, started and cancelled together.

Each part owns its own ``Tasks`` so that stopping the shard cancels everything a part spawned
(including tasks spawned later, e.g. a handoff started by a plan change) without the parts
sharing a list.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine
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


async def until_done(tasks: Collection[asyncio.Future]) -> None:
    """Until every task in ``tasks`` — a live set that done-callbacks prune, and that may grow
    meanwhile — is done. Only the tasks not done are gathered: a done task leaves the set in a
    callback run at the loop's next turn, and gather() over tasks that are all done returns
    without yielding (Python 3.12 completes it eagerly), so looping on the set itself would spin
    without ever letting that callback run, wedging the event loop."""
    while pending := [task for task in tasks if not task.done()]:
        await asyncio.gather(*pending, return_exceptions=True)


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
