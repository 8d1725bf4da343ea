"""Run a container from a locally built image with ``buildah run --isolation chroot``.

No container engine runs on the development machines (podman/crun fail on cgroups here), but
buildah's chroot isolation runs an image's process with its own root file system, the image's
user, environment and working directory, bind mounts, and the host's network. That is enough for
the local Kubernetes node (``themis_testing.kube_node``, ``THEMIS_KUBE_RUNTIME=buildah``) and the
image e2e (``images/e2e.py``) to run pods from the real images (``make images``).

Interface::

    runtime = BuildahRuntime()                       # storage driver vfs, like `make images`
    spec = ContainerSpec(
        name="themis-shard-0",                       # one working container per pod (reused on restart)
        image="localhost/themis-shard:cpu",
        command=None, args=None,                     # Kubernetes semantics, see argv()
        env={"THEMIS_HOST": "0.0.0.0", ...},
        mounts=[Mount("/tmp/pod0/data", "/data"), Mount("/tmp/pod0/plan", "/etc/plan", read_only=True)],
        bind_address="127.0.0.5",
    )
    proc = runtime.start(spec, stdout=log, stderr=subprocess.STDOUT)   # a ContainerProcess
    proc.poll(); proc.wait(timeout); proc.returncode; proc.pid
    proc.terminate(); proc.kill(); proc.stop(grace=30)                  # signals the process group
    runtime.remove("themis-shard-0")                                    # the working container

Callers with an event loop of their own (the kubelet spawns with asyncio) call
``runtime.prepare(spec)`` instead: it creates the working container and returns the host argv to
spawn with ``start_new_session=True`` (then ``os.killpg`` reaches the contained process).

* ``command``/``args`` follow Kubernetes: ``command`` replaces the image's ENTRYPOINT, ``args``
  its CMD; ``command`` without ``args`` drops the image's CMD.
* Environment: the image's ``ENV`` first, then ``env``. The host network is shared by every
  container, so ``bind_address`` is the container's own address: any ``env`` value that is a
  wildcard (``0.0.0.0``, ``::``) becomes ``bind_address`` (the kubelet does the same for its
  process pods), and ``POD_IP`` is set to it.
* Mounts are bind mounts, ``read_only`` ones mounted ``ro``; the host directory must exist.
* Names resolve through the host's ``/etc/hosts`` (bind-mounted read-only), so pod DNS names
  that the node writes there resolve inside the container too; or through ``hosts_file``, a
  file of the caller's (``hosts_text()`` writes its text), which leaves the host's alone.
* Not enforced (and not pretended): resource limits, security contexts other than the image's
  ``USER``, network or PID isolation.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

WILDCARDS = ("0.0.0.0", "::")


class ImageRuntimeError(RuntimeError):
    """buildah is missing, the image is not built, or buildah refused a command."""


@dataclass(frozen=True, slots=True)
class Mount:
    host: str
    container: str
    read_only: bool = False

    def option(self) -> str:
        # buildah's bind mounts are read-only unless told otherwise: say rw for writable ones.
        mode = "ro" if self.read_only else "rw"
        return f"type=bind,source={self.host},destination={self.container},{mode}"


@dataclass(frozen=True, slots=True)
class ImageConfig:
    """What ``buildah inspect`` says about an image's process (the parts a run needs)."""

    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    user: str = ""

    @classmethod
    def from_inspect(cls, data: Mapping[str, Any]) -> ImageConfig:
        config = (data.get("OCIv1") or {}).get("config") or {}
        env = dict(item.partition("=")[::2] for item in config.get("Env") or [])
        return cls(
            entrypoint=list(config.get("Entrypoint") or []),
            cmd=list(config.get("Cmd") or []),
            env=env,
            workdir=config.get("WorkingDir") or "/",
            user=config.get("User") or "",
        )


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    name: str
    image: str
    bind_address: str
    command: Sequence[str] | None = None
    args: Sequence[str] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: Sequence[Mount] = ()
    workdir: str | None = None
    #: a hosts file for the container's /etc/hosts (see hosts_text()); None: the host's /etc/hosts
    hosts_file: str | None = None


def argv(image: ImageConfig, command: Sequence[str] | None, args: Sequence[str] | None) -> list[str]:
    """The container's argv, as Kubernetes derives it from the image and the pod spec."""
    if command:
        return [*command, *(args or [])]
    return [*image.entrypoint, *(image.cmd if args is None else args)]


def container_env(image: ImageConfig, env: Mapping[str, str], bind_address: str) -> dict[str, str]:
    """The image's ENV, then the spec's; wildcard bind addresses become the container's own."""
    merged = {**image.env, **env}
    out = {k: (bind_address if v in WILDCARDS else v) for k, v in merged.items()}
    out["POD_IP"] = bind_address
    return out


def hosts_text(entries: Mapping[str, str]) -> str:
    """``/etc/hosts`` text: localhost, then one line per address with every name that maps to it."""
    by_address: dict[str, list[str]] = {}
    for name, address in entries.items():
        by_address.setdefault(address, []).append(name)
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
    lines += [f"{address} {' '.join(names)}" for address, names in by_address.items()]
    return "\n".join(lines) + "\n"


def run_argv(buildah: Sequence[str], spec: ContainerSpec, image: ImageConfig) -> list[str]:
    """``buildah run`` for ``spec`` (pure: the working container must exist when it runs)."""
    process = argv(image, spec.command, spec.args)
    if not process:
        raise ImageRuntimeError(f"{spec.image}: no command, and the image has no ENTRYPOINT or CMD")
    cmd = [*buildah, "run", "--isolation", "chroot", "--network", "host"]
    for key, value in sorted(container_env(image, spec.env, spec.bind_address).items()):
        cmd += ["--env", f"{key}={value}"]
    cmd += ["--mount", Mount(spec.hosts_file or "/etc/hosts", "/etc/hosts", read_only=True).option()]
    for mount in spec.mounts:
        cmd += ["--mount", mount.option()]
    if image.user:
        cmd += ["--user", image.user]
    cmd += ["--workingdir", spec.workdir or image.workdir, spec.name, "--", *process]
    return cmd


class ContainerProcess:
    """A Popen-like handle on ``buildah run``; signals go to its whole process group, so they reach
    the contained process (buildah's chroot isolation keeps it in the group)."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self._popen = popen

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    def poll(self) -> int | None:
        return self._popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._popen.wait(timeout)

    def send_signal(self, sig: int) -> None:
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._popen.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def stop(self, grace: float = 30.0) -> int:
        """SIGTERM, then SIGKILL after ``grace`` seconds (a pod's terminationGracePeriodSeconds)."""
        self.terminate()
        try:
            return self.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.wait()


class BuildahRuntime:
    """Working containers and their processes in buildah's local storage (``make images``')."""

    def __init__(self, *, buildah: str = "buildah", storage_driver: str = "vfs") -> None:
        found = shutil.which(buildah)
        if found is None:
            raise ImageRuntimeError(f"{buildah} not found: apt-get install -y buildah")
        self.buildah = [found, "--storage-driver", storage_driver]

    def _run(self, *args: str) -> str:
        done = subprocess.run([*self.buildah, *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise ImageRuntimeError(f"buildah {' '.join(args)}: {done.stderr.strip() or done.returncode}")
        return done.stdout

    def image_config(self, image: str) -> ImageConfig:
        try:
            data = json.loads(self._run("inspect", "--type", "image", image))
        except ImageRuntimeError as exc:
            raise ImageRuntimeError(f"image {image} is not in local storage (make images): {exc}") from exc
        return ImageConfig.from_inspect(data)

    def exists(self, name: str) -> bool:
        return (
            subprocess.run(
                [*self.buildah, "inspect", "--type", "container", name], capture_output=True
            ).returncode
            == 0
        )

    def prepare(self, spec: ContainerSpec) -> list[str]:
        """Create the working container ``spec.name`` (kept across restarts, like a pod's container
        layer) and return the host argv that runs the process in it."""
        image = self.image_config(spec.image)
        if self.exists(spec.name):
            current = json.loads(self._run("inspect", "--type", "container", spec.name))
            if current.get("FromImageID") != json.loads(
                self._run("inspect", "--type", "image", spec.image)
            ).get("FromImageID"):
                self.remove(spec.name)  # the image was rebuilt: start from the new one
        if not self.exists(spec.name):
            self._run("from", "--pull-never", "--name", spec.name, spec.image)
        return run_argv(self.buildah, spec, image)

    def start(
        self, spec: ContainerSpec, *, stdout: IO | int | None = None, stderr: IO | int | None = None
    ) -> ContainerProcess:
        cmd = self.prepare(spec)
        return ContainerProcess(
            subprocess.Popen(
                cmd, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, start_new_session=True
            )
        )

    def remove(self, name: str) -> None:
        if self.exists(name):
            self._run("rm", name)
