"""A started shard runs every thread it has, and every thread it starts later, under SCHED_BATCH
(no wake-up preemption); ``normal`` leaves the policy as the process was started with, and a
kernel that refuses is reported, not fatal."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest
from themis_shard.sched_policy import SchedSettings, apply_at_start
from themis_shard.settings import Settings

linux_only = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")


class RecordingScheduler:
    """Threads start under SCHED_OTHER; ``refuse`` maps a thread to the error that moving it to
    SCHED_BATCH raises."""

    def __init__(self, refuse: dict[int, OSError] | None = None) -> None:
        self.calls: list[tuple[int, int]] = []
        self.refuse = refuse or {}
        self.policies: dict[int, int] = {}

    def sched_getscheduler(self, pid: int, /) -> int:
        return self.policies.get(pid, os.SCHED_OTHER)

    def sched_getparam(self, pid: int, /) -> os.sched_param:
        return os.sched_param(0)

    def sched_setscheduler(self, pid: int, policy: int, param: os.sched_param, /) -> None:
        if pid in self.refuse and policy == os.SCHED_BATCH:
            raise self.refuse[pid]
        self.calls.append((pid, policy))
        self.policies[pid] = policy


def test_batch_is_the_default_and_settable_from_the_environment(monkeypatch) -> None:
    assert Settings().sched.policy == "batch"
    monkeypatch.setenv("THEMIS_SCHED_POLICY", "normal")
    assert Settings().sched.policy == "normal"
    monkeypatch.setenv("THEMIS_SCHED_POLICY", "fifo")
    with pytest.raises(ValueError, match="policy"):
        Settings()


@linux_only
def test_batch_reaches_every_thread_the_process_has() -> None:
    scheduler = RecordingScheduler()
    done = apply_at_start(SchedSettings(), scheduler, threads=lambda: [101, 102, 103])
    assert scheduler.calls == [(101, os.SCHED_BATCH), (102, os.SCHED_BATCH), (103, os.SCHED_BATCH)]
    assert "SCHED_BATCH" in done


def test_normal_leaves_the_policy_alone() -> None:
    scheduler = RecordingScheduler()
    assert apply_at_start(SchedSettings(policy="normal"), scheduler, threads=lambda: [1]) == "left as started"
    assert scheduler.calls == []


@linux_only
def test_a_refusal_is_reported_and_the_shard_runs_on(caplog) -> None:
    scheduler = RecordingScheduler(refuse={1: PermissionError(errno.EPERM, "Operation not permitted")})
    done = apply_at_start(SchedSettings(), scheduler, threads=lambda: [1])
    assert done == "SCHED_BATCH refused (Operation not permitted); left as started"
    assert "SCHED_BATCH refused" in caplog.text


@linux_only
def test_a_refusal_part_way_puts_the_threads_already_switched_back() -> None:
    """A thread the kernel (or a seccomp rule) refuses after others were switched: the process
    is not left half on each policy, and the message is true."""
    refusal = PermissionError(errno.EPERM, "Operation not permitted")
    scheduler = RecordingScheduler(refuse={3: refusal})
    done = apply_at_start(SchedSettings(), scheduler, threads=lambda: [1, 2, 3, 4])
    assert done == "SCHED_BATCH refused (Operation not permitted); left as started"
    assert scheduler.policies == {1: os.SCHED_OTHER, 2: os.SCHED_OTHER}
    stuck = RecordingScheduler(refuse={3: refusal})  # and thread 2, once switched, stays
    done = apply_at_start(SchedSettings(), _RefusingBack(stuck, 2), threads=lambda: [1, 2, 3])
    assert done.endswith("; 1 thread(s) could not be put back and run under it")
    assert stuck.policies == {1: os.SCHED_OTHER, 2: os.SCHED_BATCH}


class _RefusingBack:
    """A scheduler that refuses to move ``thread`` off SCHED_BATCH once it is on it."""

    def __init__(self, inner: RecordingScheduler, thread: int) -> None:
        self.inner, self.thread = inner, thread

    def sched_getscheduler(self, pid: int, /) -> int:
        return self.inner.sched_getscheduler(pid)

    def sched_getparam(self, pid: int, /) -> os.sched_param:
        return self.inner.sched_getparam(pid)

    def sched_setscheduler(self, pid: int, policy: int, param: os.sched_param, /) -> None:
        if pid == self.thread and policy != os.SCHED_BATCH and self.inner.policies.get(pid) == os.SCHED_BATCH:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        self.inner.sched_setscheduler(pid, policy, param)


@linux_only
def test_a_thread_that_ended_since_the_listing_is_skipped() -> None:
    scheduler = RecordingScheduler(refuse={2: ProcessLookupError(errno.ESRCH, "No such process")})
    apply_at_start(SchedSettings(), scheduler, threads=lambda: [1, 2, 3])
    assert scheduler.calls == [(1, os.SCHED_BATCH), (3, os.SCHED_BATCH)]


@linux_only
def test_in_a_real_process_threads_before_and_after_run_batch() -> None:
    script = (
        "import json, os, threading\n"
        "from themis_shard.sched_policy import SchedSettings, apply_at_start\n"
        "started = threading.Event(); stop = threading.Event(); ids = {}\n"
        "def early():\n"
        "    ids['early'] = threading.get_native_id(); started.set(); stop.wait()\n"
        "t = threading.Thread(target=early); t.start(); started.wait()\n"
        "apply_at_start(SchedSettings())\n"
        "def late():\n"
        "    ids['late'] = threading.get_native_id()\n"
        "    ids['late_policy'] = os.sched_getscheduler(0)\n"
        "u = threading.Thread(target=late); u.start(); u.join()\n"
        "print(json.dumps({'main': os.sched_getscheduler(0), 'early': os.sched_getscheduler(ids['early']),"
        " 'late': ids['late_policy']}))\n"
        "stop.set(); t.join()\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"main": os.SCHED_BATCH, "early": os.SCHED_BATCH, "late": os.SCHED_BATCH}
