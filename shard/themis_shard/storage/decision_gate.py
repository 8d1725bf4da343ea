"""A gate on cross-shard COMMIT decisions: what makes a cluster-wide backup one cut.

A backup closes the gate on every shard, snapshots every shard while all gates are closed, then
opens them (``backup/cut.py`` argues why that cut holds every transaction entirely or not at
all). While the gate is closed, no COMMIT entry becomes durable in the shard's transaction log
(``TxnLog`` passes the gate for each one it writes, whatever role logs it), and the log's other
writes wait behind a held COMMIT; prepares, phase 2 of decisions already logged and single-shard
writes go on. ``close`` returns only once no COMMIT is being written, so "closed" means "no
COMMIT is durable that was not before".

A gate closed by a client that then vanished must not block transactions for ever: it opens by
itself once its lease runs out. Thread-based, because ``TxnLog.decide`` runs in a worker thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class GateBusy(Exception):
    """The gate could not be closed now."""


class GateHeld(GateBusy):
    """Another backup holds the gate."""


class DecisionsInFlight(GateBusy):
    """Decisions being logged did not finish in time."""


class DecisionGate:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._passing = 0
        self._holder: str | None = None
        self._until = 0.0
        #: counts fresh closes: a holder that closes again and gets the same number has held the
        #: gate without a gap (its lease never ran out in between)
        self._closes = 0

    def _held(self) -> bool:
        """Under the condition's lock: closed and its lease not yet run out."""
        if self._holder is not None and self._clock() >= self._until:
            self._holder = None  # the lease ran out: the backup that closed it is gone
            self._cond.notify_all()
        return self._holder is not None

    @property
    def holder(self) -> str | None:
        with self._cond:
            return self._holder if self._held() else None

    @contextmanager
    def passage(self) -> Iterator[None]:
        """Wait while the gate is closed, then hold it open for the duration of the block."""
        with self._cond:
            while self._held():
                self._cond.wait(timeout=max(self._until - self._clock(), 0.001))
            self._passing += 1
        try:
            yield
        finally:
            with self._cond:
                self._passing -= 1
                self._cond.notify_all()

    def close(self, holder: str, lease_s: float, drain_s: float = 10.0) -> int:
        """Close the gate for ``holder`` (again: renews the lease) once no decision is passing;
        the number of this closing (unchanged by a renewal, new after a lapse).
        Raises :class:`GateHeld` when another holder has it, :class:`DecisionsInFlight` when the
        passing ones do not finish within ``drain_s`` (the gate is then left open)."""
        with self._cond:
            held = self._held()
            if held and self._holder != holder:
                raise GateHeld(f"backup {self._holder} holds the decision gate")
            if not held:
                self._closes += 1
            self._holder, self._until = holder, self._clock() + lease_s
            deadline = self._clock() + drain_s
            while self._passing:
                left = deadline - self._clock()
                if left <= 0:
                    self._holder = None
                    self._cond.notify_all()
                    raise DecisionsInFlight(
                        f"{self._passing} commit decision(s) still being logged after {drain_s} s"
                    )
                self._cond.wait(timeout=left)
            return self._closes

    def open(self, holder: str) -> bool:
        """Open the gate if ``holder`` has it; False when it did not (already open, or another's)."""
        with self._cond:
            if not self._held() or self._holder != holder:
                return False
            self._holder = None
            self._cond.notify_all()
            return True
