"""The CPU scheduling policy a benchmark's peer runs under: the shards' own.

A shard runs its threads under Linux's ``SCHED_BATCH`` unless ``THEMIS_SCHED_POLICY=normal``
(``themis_shard/sched_policy.py``). On the shared 2-core machines the benchmarks run on, that
policy helps any server (etcd gained as much as Themis from it), so every peer is started
under the policy the shards run with: a comparison then gives neither side the scheduler's help
alone. ``--peer-sched default`` in a benchmark starts the peer as it is packaged instead.
"""

from __future__ import annotations

import os
import shutil

#: how a policy is named in a benchmark's header line
POLICY = {True: "SCHED_BATCH", False: "the default policy"}


def shards_batch() -> bool:
    """Whether shards started from this environment ask for SCHED_BATCH (Linux only)."""
    from themis_shard.sched_policy import SchedSettings

    return hasattr(os, "SCHED_BATCH") and SchedSettings().policy == "batch"


def scheduled_batch(pid: int) -> bool:
    """Whether process ``pid`` runs under SCHED_BATCH (Linux)."""
    batch = getattr(os, "SCHED_BATCH", None)
    return batch is not None and os.sched_getscheduler(pid) == batch


def launcher(batch: bool) -> list[str]:
    """The command prefix that starts a peer under SCHED_BATCH (``chrt``), or none."""
    if not batch:
        return []
    if shutil.which("chrt") is None:
        raise SystemExit("starting the peer under SCHED_BATCH needs chrt; or --peer-sched default")
    return ["chrt", "--batch", "0"]
