"""Which threads run llama.cpp's compute, so that decoding keeps its speed.

llama.cpp computes a graph with OpenMP, and GNU OpenMP keeps a pool of worker threads per calling
thread for as long as that thread lives. Once the pools of a process hold more threads than there
are cores, every barrier of every graph (one per graph node) sleeps in the kernel instead of
spinning, and all contexts decode at about half speed. So a context's compute stays on one
long-lived thread (an engine's, or the embedder's when no engine shares the process), and a
one-off computation (an adapter's evaluation) runs on a thread of its own that exits afterwards,
taking its pool with it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable

#: Where a context's compute runs: takes the work, answers its future.
type Runner = Callable[[Callable[[], object]], concurrent.futures.Future]


def on_own_thread[T](fn: Callable[[], T], name: str = "llm-oneoff") -> concurrent.futures.Future[T]:
    """Run ``fn`` on a new thread that ends with it (and with it, its OpenMP pool)."""
    fut: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            fut.set_result(fn())
        except BaseException as exc:
            fut.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return fut


async def run_once[T](fn: Callable[[], T], name: str = "llm-oneoff") -> T:
    """Await ``fn`` run by :func:`on_own_thread`."""
    return await asyncio.wrap_future(on_own_thread(fn, name))


def oversubscription(engines: int, threads: int, cores: int) -> str | None:
    """Why several engines in one process would decode slowly, or None: each engine's thread has
    its own OpenMP pool, and pools holding more threads than cores throttle every barrier."""
    if engines < 2 or threads < 2 or engines * threads <= cores:
        return None
    return (
        f"{engines} engines with {threads} threads each on {cores} cores: their OpenMP pools "
        f"outnumber the cores and every engine decodes slower; set THEMIS_LLM_N_THREADS to "
        f"{max(1, cores // engines)}"
    )
