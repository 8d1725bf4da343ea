"""Spec: storage faults become answers in one place. A full disk is 507 ``insufficient_storage``
and another IO error 503 ``storage_failed``, both saying nothing was written; anything else (a
bug, a 4xx raised while planning a write) propagates unchanged. The shard remembers that it
cannot write until a probe write succeeds (the real full-disk run is in e2e/test_true_answers.py)."""

from __future__ import annotations

import errno

import pytest
from themis_shard.errors import BadRequest, InsufficientStorage, ThemisError
from themis_shard.storage.health import StorageHealth, storage_error


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (
            Exception("IO error: No space left on device: While appending to file: 000012.log"),
            507,
            "insufficient_storage",
        ),
        (
            Exception("IO error: No space left on deviceWhile appending (background error)"),
            507,
            "insufficient_storage",
        ),
        (OSError(errno.ENOSPC, "No space left on device"), 507, "insufficient_storage"),
        (Exception("IO error: Input/output error"), 503, "storage_failed"),
        (OSError(errno.EIO, "Input/output error"), 503, "storage_failed"),
    ],
)
def test_storage_faults_become_answers_that_say_nothing_was_written(exc, status, code):
    answer = storage_error(exc)
    assert answer is not None and (answer.status, answer.code) == (status, code)
    assert "nothing was written" in answer.message


@pytest.mark.parametrize(
    "exc", [BadRequest("bad"), ValueError("x"), Exception("key not found"), OSError(errno.ENOENT, "gone")]
)
def test_other_errors_are_not_storage_faults(exc):
    assert storage_error(exc) is None


def test_the_shard_stays_unwritable_until_a_probe_write_succeeds():
    now = [0.0]
    disk_full = [True]

    def write():
        if disk_full[0]:
            raise Exception("IO error: No space left on device")

    health = StorageHealth(probe_interval_s=1.0, clock=lambda: now[0])
    health.attach_probe(write)
    with pytest.raises(InsufficientStorage), health.guard():
        write()
    assert not health.writable and health.status()["code"] == "insufficient_storage"
    with pytest.raises(ThemisError) as refused:
        health.check()
    assert refused.value.status == 507
    disk_full[0] = False
    assert not health.probe()  # within the interval: not tried again yet
    now[0] = 1.5
    assert health.probe() and health.writable and health.status() == {"writable": True}
