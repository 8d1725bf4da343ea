"""The pod's file system on this node: container paths → host paths (pure).

A process cannot get its own ``/``, so each pod has a private root directory on the host
(``<node root>/pods/<namespace>/<pod>/rootfs``) and every container path is mapped into it:

1. a path under a volume's ``mountPath`` → that volume's host directory (PVC directories,
   ConfigMap/Secret directories, emptyDirs), the longest mount first;
2. a path under the image's install prefix (``/opt/themis``, the venv the Dockerfile builds) →
   the node's venv, which *is* the image here (see ``image``);
3. the operating system's directories (``/usr``, ``/bin``, ``/lib``, ``/etc/ssl``, ``/dev``,
   ``/proc``, …) → the host's own, since the image's OS is the host's;
4. any other absolute path (``/home/themis``, ``/tmp``, an unmounted ``/models``) → the same
   path inside the pod's private root, which starts empty — so a path the real image would not
   have is missing here too.

The mapping is applied to what the process is given — env values that are absolute paths (and
each entry of ``PATH``-like lists), absolute ``command``/``args`` words and the working
directory — never to the operator's manifests. Paths inside a word (a ``sh -c`` script) are
not rewritten: such a script reads its paths from env variables. Each mount is also linked at
its mountPath inside the private root, so paths reached through a parent directory work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

HOST_DIRS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/dev",
    "/proc",
    "/sys",
    "/etc/ssl",
    "/etc/alternatives",
)


def _under(path: str, prefix: str) -> str | None:
    """``path`` relative to ``prefix`` ('' when equal), or None when outside it."""
    p, q = PurePosixPath(path), PurePosixPath(prefix)
    if p == q:
        return ""
    try:
        return str(p.relative_to(q))
    except ValueError:
        return None


@dataclass(frozen=True)
class PathMap:
    rootfs: str
    #: container mountPath → host directory
    mounts: Mapping[str, str]
    #: container install prefix of the image (e.g. /opt/themis) → host venv prefix
    image_prefixes: Mapping[str, str]

    def host(self, path: str) -> str:
        """The host path of absolute container ``path``."""
        for prefix, target in sorted(
            [*self.mounts.items(), *self.image_prefixes.items()], key=lambda kv: -len(kv[0])
        ):
            rest = _under(path, prefix)
            if rest is not None:
                return str(PurePosixPath(target) / rest) if rest else target
        if any(_under(path, d) is not None for d in HOST_DIRS):
            return path
        return str(PurePosixPath(self.rootfs) / PurePosixPath(path).relative_to("/"))

    def value(self, value: str) -> str:
        """An env value or argv word: absolute paths (and ``:``-lists of them) mapped, else unchanged."""
        if not value.startswith("/"):
            return value
        parts = value.split(":")
        if len(parts) > 1 and all(p.startswith("/") for p in parts):
            return ":".join(self.host(p) for p in parts)
        return self.host(value)

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {k: self.value(v) for k, v in env.items()}
