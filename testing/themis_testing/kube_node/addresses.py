"""The node's network: one loopback address per pod and per Service, names in /etc/hosts.

Linux routes all of 127.0.0.0/8 to the loopback interface, so every pod gets an address of its
own in a /24 the node picks at start (``127.A.B.0/24``, random A/B so that nodes of parallel test
runs do not collide; ``--subnet`` fixes it): pods from ``.2``, Services from ``.200``. A pod keeps
its address for as long as its name exists (a recreated pod comes back at the same address).

Binding: a pod in Kubernetes has its own network namespace, so ``0.0.0.0`` there means "every
interface of this pod". Here a process binding ``0.0.0.0`` would take the port on every address
of the host, so the kubelet passes the pod's address wherever the pod's environment names a
wildcard bind address (an env value of exactly ``0.0.0.0`` or ``::``).

DNS: the host resolves names through /etc/hosts (``hosts: files dns``), so the node writes
a block of entries there — pods with ``hostname``/``subdomain`` get
``HOST.SUBDOMAIN.NS.svc.cluster.local``, ``HOST.SUBDOMAIN.NS.svc`` and ``HOST.SUBDOMAIN.NS``;
Services with a proxy get ``SVC.NS.svc.cluster.local``, ``SVC.NS.svc`` and ``SVC.NS``. The block
is delimited by markers naming the node's pid, rewritten in place under a lock (Docker-style
bind-mounted /etc/hosts cannot be replaced by rename), removed on stop; blocks of nodes whose
pid no longer runs are removed too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import re
from collections.abc import Iterable
from pathlib import Path

LOCK = Path("/tmp/themis-kube-node-hosts.lock")
_BLOCK = re.compile(r"# BEGIN themis-kube-node (\d+)\n.*?# END themis-kube-node \1\n", re.S)


class Addresses:
    """Stable address per key (``("pod"|"svc", namespace, name)``) inside one /24."""

    def __init__(self, subnet: str | None = None) -> None:
        self.subnet = subnet or f"127.{random.randint(64, 250)}.{random.randint(1, 254)}"
        self._given: dict[tuple[str, str, str], str] = {}

    def get(self, kind: str, namespace: str, name: str) -> str:
        key = (kind, namespace, name)
        if key not in self._given:
            start, stop = (200, 255) if kind == "svc" else (2, 200)
            used = {a for k, a in self._given.items() if k[0] == kind}
            free = next((n for n in range(start, stop) if f"{self.subnet}.{n}" not in used), None)
            if free is None:
                raise RuntimeError(f"no free {kind} address left in {self.subnet}.0/24")
            self._given[key] = f"{self.subnet}.{free}"
        return self._given[key]

    def release(self, kind: str, namespace: str, name: str) -> None:
        self._given.pop((kind, namespace, name), None)


def pod_names(hostname: str, subdomain: str, namespace: str) -> list[str]:
    base = f"{hostname}.{subdomain}.{namespace}"
    return [f"{base}.svc.cluster.local", f"{base}.svc", base]


def service_names(name: str, namespace: str) -> list[str]:
    base = f"{name}.{namespace}"
    return [f"{base}.svc.cluster.local", f"{base}.svc", base]


def render_block(owner: int, entries: Iterable[tuple[str, list[str]]]) -> str:
    lines = [f"{address} {' '.join(names)}" for address, names in sorted(entries)]
    if not lines:
        return ""
    return (
        f"# BEGIN themis-kube-node {owner}\n"
        + "".join(f"{line}\n" for line in lines)
        + (f"# END themis-kube-node {owner}\n")
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def replace_block(text: str, owner: int, block: str) -> str:
    """``text`` with this owner's block replaced and dead owners' blocks dropped (pure but for pids)."""

    def keep(m: re.Match) -> str:
        pid = int(m.group(1))
        return m.group(0) if pid != owner and _alive(pid) else ""

    text = _BLOCK.sub(keep, text)
    if text and not text.endswith("\n"):
        text += "\n"
    return text + block


class HostsFile:
    def __init__(self, path: Path = Path("/etc/hosts"), owner: int | None = None) -> None:
        self.path, self.owner = path, owner or os.getpid()
        self._last: str | None = None

    def write(self, entries: Iterable[tuple[str, list[str]]]) -> None:
        block = render_block(self.owner, entries)
        if block == self._last:
            return
        with LOCK.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            with self.path.open("r+") as f:
                new = replace_block(f.read(), self.owner, block)
                f.seek(0)
                f.write(new)
                f.truncate()
        self._last = block

    def clear(self) -> None:
        with contextlib.suppress(OSError):
            self._last = None
            self.write([])
