"""How a shard process asks the kernel to schedule its threads.

A shard is a throughput server, and the hosts it runs on are shared: three shards, their
clients and their peers' threads on a 2-core machine, or a Kubernetes node packed with pods.
More threads are runnable than there are cores, and under Linux's default policy a thread that
wakes (a peer's answer, a client's request, the group commit's fsync coming back) may preempt
the one running. A write crosses three processes and several threads, so it was cut into many
short slices, each one resuming on cold caches: on three shards under 16 writers at
w=majority, about 3.3 involuntary context switches per write on the event loops.

``batch`` runs every thread of the shard under ``SCHED_BATCH``: the same nice value and the same
share of the CPU, but a woken thread does not preempt a running one; it waits for the end of
its slice or for an idle core. So an event loop finishes its turn. Measured on three shards
(RAID1), interleaved with the default policy: 16 writers at w=majority 741 -> 804 writes/s
(median of 3) with 13 % less CPU per write, 64 writers +10-28 %, 16 single-shard transactions
658 -> 741/s; at 1 client no change (a woken thread finds an idle core), and GETs and RAG answers
within noise. etcd gains as much from it (16 writers 819 -> 1,036 puts/s), so
``bench/storage.py`` starts its etcd under the shards' policy.

Applied first thing by the process entry point, to every thread the process has (imports may
have started some: OpenBLAS's pool) and so to every thread started later, which inherits it:
the event loop, the worker threads, RocksDB's and llama.cpp's. Never by ``create_app`` (a test
process builds many apps). An unprivileged process may choose
``SCHED_BATCH``; where the kernel or a seccomp profile refuses, the shard says so and runs on,
every thread back on the policy it was started with (a refusal part-way puts back the threads
already switched).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Literal, Protocol

from pydantic_settings import BaseSettings, SettingsConfigDict

log = logging.getLogger(__name__)


class SchedSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_SCHED_", extra="ignore")

    #: ``batch``: SCHED_BATCH, no wake-up preemption (Linux). ``normal``: the policy the process
    #: was started with, left as it is.
    policy: Literal["batch", "normal"] = "batch"


class Scheduler(Protocol):
    """The part of the ``os`` module the policy uses (a seam for its specs)."""

    def sched_getscheduler(self, pid: int, /) -> int: ...

    def sched_getparam(self, pid: int, /) -> os.sched_param: ...

    def sched_setscheduler(self, pid: int, policy: int, param: os.sched_param, /) -> None: ...


def process_threads() -> list[int]:
    """The ids of this process's threads (Linux), the calling one (0) when they cannot be listed."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def apply_at_start(
    settings: SchedSettings,
    scheduler: Scheduler = os,
    threads: Callable[[], list[int]] = process_threads,
) -> str:
    """Once, at start-up: the policy for every thread the process has, which the threads it
    starts later inherit. Returns what was done, as logged."""
    if settings.policy == "normal":
        done = "left as started"
    elif (batch := getattr(os, "SCHED_BATCH", None)) is None:
        done = "SCHED_BATCH is not available on this platform; left as started"
    else:
        switched: list[tuple[int, int, os.sched_param]] = []
        try:
            for thread in threads():
                try:
                    before = scheduler.sched_getscheduler(thread), scheduler.sched_getparam(thread)
                    scheduler.sched_setscheduler(thread, batch, os.sched_param(0))
                except ProcessLookupError:  # it ended since the listing
                    continue
                switched.append((thread, *before))
        except OSError as e:
            # a refusal part-way (one thread's, a seccomp rule's) must not leave the process
            # half on each policy: the threads switched already go back as they were
            kept = _put_back(scheduler, switched)
            done = f"SCHED_BATCH refused ({e.strerror or e}); " + (
                "left as started" if not kept else f"{kept} thread(s) could not be put back and run under it"
            )
            log.warning("CPU scheduling: %s", done)
            return done
        done = "SCHED_BATCH (no wake-up preemption)"
    log.info("CPU scheduling: %s", done)
    return done


def _put_back(scheduler: Scheduler, switched: list[tuple[int, int, os.sched_param]]) -> int:
    """Give each thread back the policy it had; how many kept the new one (refused again)."""
    kept = 0
    for thread, policy, param in reversed(switched):
        try:
            scheduler.sched_setscheduler(thread, policy, param)
        except ProcessLookupError:
            continue
        except OSError:
            kept += 1
    return kept
