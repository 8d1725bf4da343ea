"""A history of client operations: one invocation and one completion per operation.

Outcomes follow Jepsen: ``ok`` (it happened, with this result), ``fail`` (it definitely did
not happen: 409, another 4xx, or a connection that never reached a shard: ``unreachable``) and ``info``
(indeterminate: a timeout, a torn connection — ``connection_lost`` — a 5xx, any 503 but the two that say the
request never reached a coordinator — ``write_outcome_unknown`` and ``replicas_unavailable``,
after which the version may have been burned, included). Checkers treat ``info`` operations as
may-or-may-not-have-happened.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import httpx
from themis_client import ThemisError
from themis_client.errors import ThemisConnectionError

#: 503 codes that say no coordinator saw the write (``cluster/documents/coordinator.py``: forward_failure).
UNSENT_503 = frozenset({"coordinator_unavailable", "starting"})


class Outcome(StrEnum):
    OK = "ok"
    FAIL = "fail"
    INFO = "info"


@dataclass(frozen=True)
class Op:
    """One completed operation. ``invoke``/``complete`` are monotonic seconds; an ``info``
    operation's effect may land any time after ``invoke`` (or never)."""

    process: int
    workload: str
    f: str
    key: str
    arg: Any
    invoke: float
    complete: float
    outcome: Outcome
    result: Any = None
    error: str = ""


def classify(exc: BaseException) -> tuple[Outcome, str]:
    """What an exception from ``themis_client`` (or httpx under it) says about the operation."""
    if isinstance(exc, ThemisConnectionError):
        if exc.code == "unreachable":  # connect refused/timed out on every try: never sent
            return Outcome.FAIL, "unreachable"
        return Outcome.INFO, exc.code  # connection_lost: broken after sending, may have applied
    if isinstance(exc, ThemisError):
        if 400 <= exc.status < 500 or (exc.status == 503 and exc.code in UNSENT_503):
            return Outcome.FAIL, f"{exc.status} {exc.code}"
        return Outcome.INFO, f"{exc.status} {exc.code}"
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return Outcome.FAIL, type(exc).__name__
    if isinstance(exc, httpx.HTTPError):
        return Outcome.INFO, type(exc).__name__
    raise exc


@dataclass
class History:
    """Thread-safe recorder shared by every client worker."""

    ops: list[Op] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, process: int, workload: str, f: str, key: str, arg: Any, call) -> Op:
        """Invoke ``call()`` and record its completion; ``call`` returns the ``ok`` result."""
        start = time.monotonic()
        try:
            result = call()
            op = Op(process, workload, f, key, arg, start, time.monotonic(), Outcome.OK, result)
        except (ThemisError, httpx.HTTPError) as exc:
            outcome, error = classify(exc)
            op = Op(process, workload, f, key, arg, start, time.monotonic(), outcome, None, error)
        with self._lock:
            self.ops.append(op)
        return op

    def snapshot(self) -> list[Op]:
        with self._lock:
            return list(self.ops)
