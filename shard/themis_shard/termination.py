"""The reason a shard could not start, written where Kubernetes shows it.

A pod whose shard fails at start-up (a model source that cannot be fetched, a wrong sha256)
would otherwise be an unexplained crash loop: the kubelet copies this file into the pod's
``lastState.terminated.message``, where the operator reads it into the ThemisCluster's
Degraded condition (and ``kubectl describe pod`` shows it).
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

#: Kubernetes reads at most 4096 bytes of a termination message.
MAX_BYTES = 4096


def termination_message(exc: BaseException) -> str:
    """One line: the error's own message (a ThemisError's code first), never a traceback."""
    code = getattr(exc, "code", None)
    text = " ".join(str(exc).split()) or type(exc).__name__
    line = f"{code}: {text}" if isinstance(code, str) else f"{type(exc).__name__}: {text}"
    return line.encode()[:MAX_BYTES].decode(errors="ignore")


def write_termination_message(path: Path | None, exc: BaseException) -> None:
    if path is None:
        return
    try:
        path.write_text(termination_message(exc) + "\n")
    except OSError as err:  # never hide the original error behind this one
        log.warning("could not write the termination message to %s: %s", path, err)
