"""Whether this shard can write: the one place storage errors become answers.

RocksDB reports a full disk (ENOSPC) or a failing one as a bare ``Exception`` whose text names
the IO error (and, after a failed flush, the same "background error" on every write until it
recovers). Every write of the store goes through :meth:`StorageHealth.guard`: such an error
marks the shard unwritable and becomes 507 ``insufficient_storage`` (a full disk) or 503
``storage_failed`` (another IO error). RocksDB applies a write batch whole or not at all, so a
write refused here was not applied, and the answer says so.

While unwritable, ``/ready`` is false (a load balancer stops sending clients here), ``GET
/v1/cluster/status`` says why (``storage``), ``themis_storage_writable`` is 0, and coordinated
writes are refused before anything is sent to another owner. A probe write, at most once per
``probe_interval_s`` when someone asks, clears it once the disk takes writes again.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import InsufficientStorage, ThemisError, Unavailable

log = logging.getLogger(__name__)

#: Texts of RocksDB's IO errors that mean "no room" (ENOSPC, a space limit, a quota).
_FULL = ("no space left", "space limit", "disk quota", "nospace")


def storage_error(exc: BaseException) -> ThemisError | None:
    """The answer for a failed storage write, or None when ``exc`` is not a storage fault (a
    bug, a 4xx raised while planning the write) and must propagate as it is."""
    if isinstance(exc, ThemisError):
        return None
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        text = str(exc)
    elif isinstance(exc, OSError) and exc.errno == errno.EIO:
        return Unavailable(
            f"this shard's storage failed the write ({exc}); nothing was written", code="storage_failed"
        )
    elif type(exc) is Exception and "io error" in str(exc).lower():  # rocksdict's bare Exception
        text = str(exc)
    else:
        return None
    if any(word in text.lower() for word in _FULL) or isinstance(exc, OSError):
        return InsufficientStorage(f"this shard's disk is full ({text.strip()}); nothing was written")
    return Unavailable(
        f"this shard's storage failed the write ({text.strip()}); nothing was written", code="storage_failed"
    )


class StorageHealth:
    """The shard's own record of whether its disk takes writes (thread-safe)."""

    def __init__(self, *, probe_interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.probe_interval_s = probe_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._error: ThemisError | None = None
        self._since: float | None = None
        self._last_probe = 0.0
        self._probe: Callable[[], None] | None = None

    def attach_probe(self, probe: Callable[[], None]) -> None:
        """``probe``: a tiny synced write, tried to learn whether the disk takes writes again."""
        self._probe = probe

    @property
    def writable(self) -> bool:
        return self._error is None

    @property
    def reason(self) -> str | None:
        """Why this shard cannot write now (None: it can)."""
        error = self._error
        return None if error is None else error.message

    def status(self) -> dict[str, Any]:
        """``/v1/cluster/status``'s ``storage``: writable, and if not, why and for how long."""
        error, since = self._error, self._since
        if error is None:
            return {"writable": True}
        return {
            "writable": False,
            "code": error.code,
            "reason": error.message,
            "unwritable_s": round(self._clock() - (since or self._clock()), 1),
        }

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Around one storage write: a storage fault becomes its answer and marks the shard
        unwritable; a success clears the mark."""
        try:
            yield
        except Exception as exc:
            answer = storage_error(exc)
            if answer is None:
                raise
            self._mark(answer)
            raise answer from exc
        if self._error is not None:
            self._clear()

    def check(self) -> None:
        """Raise the standing refusal when the disk still does not take writes (probing it first,
        at most once per interval): a coordinator asks before it sends a write anywhere."""
        if self._error is None:
            return
        self.probe()
        error = self._error
        if error is not None:
            raise type(error)(error.message, code=error.code, status=error.status)

    def probe(self) -> bool:
        """Try the probe write when unwritable and the last try is older than the interval."""
        if self._error is None or self._probe is None:
            return self._error is None
        now = self._clock()
        with self._lock:
            if now - self._last_probe < self.probe_interval_s:
                return False
            self._last_probe = now
        try:
            with self.guard():
                self._probe()
        except ThemisError:
            return False
        return True

    def _mark(self, error: ThemisError) -> None:
        with self._lock:
            if self._error is None:
                self._since = self._clock()
                self._last_probe = self._clock()
                log.error("storage refuses writes: %s", error.message)
            self._error = error

    def _clear(self) -> None:
        with self._lock:
            if self._error is not None:
                log.warning("storage takes writes again (after %.0f s)", self._clock() - (self._since or 0.0))
            self._error, self._since = None, None


class GuardedDB:
    """An ``Rdict`` whose writes go through ``health.guard`` (everything else is the Rdict's own),
    so the store and its neighbours (hints, intents, the in-flight log) map storage errors in
    one place."""

    def __init__(self, db: Any, health: StorageHealth) -> None:
        self._db = db
        self._health = health

    @property
    def raw(self) -> Any:
        """The Rdict itself, for calls that take one (a checkpoint): never for writes."""
        return self._db

    def write(self, batch: Any, options: Any = None) -> None:
        with self._health.guard():
            if options is None:
                self._db.write(batch)
            else:
                self._db.write(batch, options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)
