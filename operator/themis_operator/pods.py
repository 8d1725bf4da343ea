"""What the shard pods say about themselves: a pod that cannot start, and why.

A shard that fails at start-up (its model source cannot be fetched, a sha256 does not match,
the image cannot be pulled) never answers ``/v1/cluster/status``; the kubelet's pod status is
the only witness. The shard writes its reason to the termination log, which the kubelet copies
into ``lastState.terminated.message``; this module turns that into one line per failing pod.
Pure: pod dicts in, :class:`PodProblem` out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: Waiting reasons that mean "this pod will not become ready by itself".
STUCK = frozenset(
    {
        "CrashLoopBackOff",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
#: Start-up error codes (``termination.termination_message``) that name a bad model source.
SOURCE_CODES = (
    "source_unavailable",
    "source_too_large",
    "sha256_mismatch",
    "bad_source",
    "source_not_found",
    "not_gguf",
)


@dataclass(frozen=True)
class PodProblem:
    pod: str
    #: The kubelet's reason (CrashLoopBackOff, ImagePullBackOff, Error, ...).
    reason: str
    #: The container's own words (its termination message), or the kubelet's message.
    message: str
    restarts: int = 0

    @property
    def bad_source(self) -> bool:
        return self.message.startswith(SOURCE_CODES)

    def line(self) -> str:
        text = f"{self.pod}: {self.reason}"
        return f"{text}: {self.message}" if self.message else text


def _last_words(status: dict) -> str:
    for key in ("lastState", "state"):
        terminated = (status.get(key) or {}).get("terminated") or {}
        if message := (terminated.get("message") or "").strip():
            return message.splitlines()[-1].strip()
    return ""


def pod_problem(pod: dict) -> PodProblem | None:
    """Why ``pod`` is stuck, or None while it is fine (or still simply starting)."""
    name = (pod.get("metadata") or {}).get("name") or "?"
    status = pod.get("status") or {}
    for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (c.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason") or ""
        restarts = int(c.get("restartCount") or 0)
        words = _last_words(c)
        if reason in STUCK or (restarts > 0 and words and not c.get("ready")):
            return PodProblem(name, reason or "Restarting", words or (waiting.get("message") or ""), restarts)
    if status.get("phase") == "Failed":
        return PodProblem(name, status.get("reason") or "Failed", status.get("message") or "")
    return None


def pod_problems(pods: Iterable[dict]) -> tuple[PodProblem, ...]:
    found = (pod_problem(p) for p in pods)
    return tuple(sorted((p for p in found if p is not None), key=lambda p: p.pod))
