"""How soon kopf runs a failed handler again.

kopf waits 60 s before it retries a handler that raised. A ``kubectl delete`` of an object
with our finalizer waits that long too, so a conflict that the next attempt resolves at once
(the plan authority moved the plan while a handler decided from the old one) is retried in a
second instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import kopf

from .kube import Conflict

#: Seconds before a handler that hit a conflict runs again.
CONFLICT_RETRY_S = 1.0
#: Seconds before an adapter's deletion handler that failed otherwise runs again (kopf's
#: default is 60): ``kubectl delete`` waits for it.
HANDLER_BACKOFF_S = 5.0


@contextmanager
def soon_after_conflict() -> Iterator[None]:
    """A ``Conflict`` raised inside becomes a ``kopf.TemporaryError`` retried in 1 s."""
    try:
        yield
    except Conflict as e:
        raise kopf.TemporaryError(f"a child changed underneath: {e}", delay=CONFLICT_RETRY_S) from e
