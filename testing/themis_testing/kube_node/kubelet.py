"""The process kubelet: one supervised OS process per pod container, started from the pod spec.

For each pod the runner (1) renders its volumes, (2) builds the environment and argv exactly
from the spec (``env``, ``envFrom``, image ENTRYPOINT/CMD/ENV, see ``env``), maps container
paths to host paths (``paths``) and puts the pod's address where the spec names a wildcard
bind address (``addresses``), (3) runs ``initContainers`` to completion in order, then the
first container, (4) runs its ``startupProbe``, ``readinessProbe`` and ``livenessProbe``
(``httpGet``; ``exec``/``tcpSocket``/``grpc`` are refused by name), (5) restarts an exited or
unhealthy process with exponential back-off (``CrashLoopBackOff``), and (6) writes the pod's
status (phase, conditions, podIP, containerStatuses with restartCount, state, lastState).

Stopping sends SIGTERM to the process group, then SIGKILL after
``terminationGracePeriodSeconds``. Not enforced by this node, and said so here rather than
pretended: resource requests/limits (GPUs included), ``readOnly`` mounts, security contexts
(processes run as the node's user), and pods with more than one regular container (refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .backoff import Backoff
from .client import Api, ApiError
from .env import ConfigError, PodFacts, container_argv, container_env
from .image import ImageConfig
from .paths import PathMap
from .volumes import claim_dir, sync_files, volume_files

log = logging.getLogger("kube_node.kubelet")
WILDCARDS = ("0.0.0.0", "::")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass
class Cache:
    """The node's latest view of the objects pods depend on, by namespace and name."""

    configmaps: dict[tuple[str, str], dict] = field(default_factory=dict)
    secrets: dict[tuple[str, str], dict] = field(default_factory=dict)
    claims: dict[tuple[str, str], dict] = field(default_factory=dict)

    def in_namespace(self, kind: str, namespace: str) -> dict[str, dict]:
        objects = getattr(self, kind)
        return {name: obj for (ns, name), obj in objects.items() if ns == namespace}


@dataclass(frozen=True)
class KubeletConfig:
    root: Path
    image: ImageConfig
    #: host prefix standing in for the image's install prefixes (the venv)
    venv: Path
    #: masked modules directory + the image's code, put first on PYTHONPATH
    pythonpath: list[str]
    node_name: str = "themis-node"
    backoff: Backoff = field(default_factory=Backoff)
    #: probe at least this often (a node setting; None = the pod's periodSeconds)
    probe_period_max_s: float | None = None


class Probe:
    """One httpGet probe's schedule and counters."""

    def __init__(self, spec: Mapping, container: Mapping, ip: str, period_cap: float | None) -> None:
        if "httpGet" not in spec:
            kinds = sorted(k for k in spec if k in ("exec", "tcpSocket", "grpc"))
            raise ConfigError(f"probe kinds {kinds} are not supported by this node (httpGet only)")
        get = spec["httpGet"]
        port = get.get("port")
        if isinstance(port, str) and not port.isdigit():
            named = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
            if port not in named:
                raise ConfigError(f"probe port {port!r} names no containerPort")
            port = named[port]
        scheme = get.get("scheme", "HTTP").lower()
        self.url = f"{scheme}://{get.get('host') or ip}:{port}{get.get('path', '/')}"
        self.headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or []}
        self.initial = float(spec.get("initialDelaySeconds", 0))
        self.period = float(spec.get("periodSeconds", 10))
        if period_cap is not None:
            self.period = min(self.period, period_cap)
        self.timeout = float(spec.get("timeoutSeconds", 1))
        self.successes_needed = int(spec.get("successThreshold", 1))
        self.failures_allowed = int(spec.get("failureThreshold", 3))
        self.next_at = 0.0
        self.successes = self.failures = 0

    def start(self, now: float) -> None:
        self.next_at = now + self.initial
        self.successes = self.failures = 0

    async def check(self, http: httpx.AsyncClient, now: float) -> bool | None:
        """None when not due; else whether the probe's verdict is now success."""
        if now < self.next_at:
            return None
        self.next_at = now + self.period
        try:
            r = await http.get(self.url, headers=self.headers, timeout=self.timeout)
            ok = 200 <= r.status_code < 400
        except httpx.HTTPError:
            ok = False
        if ok:
            self.successes, self.failures = self.successes + 1, 0
        else:
            self.successes, self.failures = 0, self.failures + 1
        return ok


class PodRunner:
    def __init__(self, pod: dict, ip: str, config: KubeletConfig, cache: Cache, api: Api) -> None:
        self.pod, self.ip, self.config, self.cache, self.api = pod, ip, config, cache, api
        meta = pod["metadata"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.dir = config.root / "pods" / self.namespace / self.name
        self.process: asyncio.subprocess.Process | None = None
        self.restarts = 0
        self.step = 0
        self.ready = False
        self.started = False
        self.state: dict = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: dict = {}
        self.phase = "Pending"
        self.init_done = False
        self.claim_dirs: set[Path] = set()
        self._stop = asyncio.Event()
        self._written: dict | None = None
        self.start_time = _now()
        self.http = httpx.AsyncClient(verify=False)

    # ---- the pod's file system and process config ------------------------------------------
    def _mounts(self, container: Mapping) -> dict[str, str]:
        volumes = {v["name"]: v for v in self.pod["spec"].get("volumes") or []}
        mounts: dict[str, str] = {}
        for m in container.get("volumeMounts") or []:
            if m.get("subPath") or m.get("subPathExpr"):
                raise ConfigError(f"volumeMount {m['name']}: subPath is not supported by this node")
            volume = volumes.get(m["name"])
            if volume is None:
                raise ConfigError(f"volumeMount {m['name']} names no volume")
            mounts[m["mountPath"]] = str(self._volume_dir(volume))
        # The kubelet bind-mounts a file for the termination message (read into lastState).
        mounts[container.get("terminationMessagePath", "/dev/termination-log")] = str(self._message_file())
        return mounts

    def _message_file(self) -> Path:
        path = self.dir / "termination-log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        return path

    def termination_message(self, container: Mapping) -> str:
        """What the process wrote to its terminationMessagePath, else (FallbackToLogsOnError) its log tail."""
        path = self.dir / "termination-log"
        text = path.read_text(errors="replace")[-4096:] if path.exists() else ""
        if not text.strip() and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            log_file = self.dir / f"{container['name']}.log"
            if log_file.exists():
                text = "\n".join(log_file.read_text(errors="replace").splitlines()[-80:])[-2048:]
        return text.strip()

    def _volume_dir(self, volume: Mapping) -> Path:
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            pvc = self.cache.claims.get((self.namespace, claim))
            if pvc is None:
                raise ConfigError(f'persistentvolumeclaim "{claim}" not found')
            path = claim_dir(self.config.root, self.namespace, claim, pvc["metadata"]["uid"])
            path.mkdir(parents=True, exist_ok=True)
            self.claim_dirs.add(path)
            return path
        path = self.dir / "volumes" / volume["name"]
        if "configMap" in volume or "secret" in volume:
            files = volume_files(
                volume,
                self.cache.in_namespace("configmaps", self.namespace),
                self.cache.in_namespace("secrets", self.namespace),
            )
            sync_files(path, files)
            return path
        if "emptyDir" in volume:
            path.mkdir(parents=True, exist_ok=True)
            return path
        kinds = sorted(k for k in volume if k != "name")
        raise ConfigError(f"volume {volume['name']}: {kinds} volumes are not supported by this node")

    def _facts(self) -> PodFacts:
        meta = self.pod["metadata"]
        return PodFacts(
            name=self.name,
            namespace=self.namespace,
            uid=self.uid,
            pod_ip=self.ip,
            node_name=self.config.node_name,
            service_account=self.pod["spec"].get("serviceAccountName", "default"),
            labels=meta.get("labels") or {},
            annotations=meta.get("annotations") or {},
        )

    def process_config(self, container: Mapping) -> tuple[list[str], dict[str, str], str]:
        """(argv, env, cwd) for ``container``, host paths throughout."""
        image = self.config.image
        env = container_env(
            container,
            self._facts(),
            image.env,
            self.cache.in_namespace("configmaps", self.namespace),
            self.cache.in_namespace("secrets", self.namespace),
        )
        env = {k: (self.ip if v in WILDCARDS else v) for k, v in env.items()}
        argv = container_argv(container, image.entrypoint, image.cmd, env)
        paths = PathMap(
            rootfs=str(self.dir / "rootfs"),
            mounts=self._mounts(container),
            image_prefixes={p: str(self.config.venv) for p in image.prefixes},
        )
        self._link_mounts(paths)
        env = paths.env(env)
        argv = [paths.value(a) for a in argv]
        found = shutil.which(argv[0], path=env.get("PATH", "")) if "/" not in argv[0] else argv[0]
        if not found:
            raise ConfigError(f'executable "{argv[0]}" not found in the image\'s PATH')
        argv[0] = found
        env["PYTHONPATH"] = os.pathsep.join([*self.config.pythonpath, *filter(None, [env.get("PYTHONPATH")])])
        cwd = paths.host(container.get("workingDir") or image.workdir)
        Path(cwd).mkdir(parents=True, exist_ok=True)
        (self.dir / "rootfs" / "tmp").mkdir(parents=True, exist_ok=True)
        return argv, env, cwd

    @staticmethod
    def _link_mounts(paths: PathMap) -> None:
        """Each mount also appears at its mountPath inside the pod's root (a symlink), so a path
        reached through a parent directory (``--directory /srv`` with ``/srv/conf`` mounted) works."""
        root = Path(paths.rootfs)
        for mount_path, target in paths.mounts.items():
            link = root / mount_path.lstrip("/")
            if link.is_symlink() and os.readlink(link) == target:
                continue
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.is_file():
                link.unlink()
            elif link.exists():
                continue  # a real directory the pod made: leave it
            link.symlink_to(target)

    def refresh_volumes(self) -> None:
        """Re-render ConfigMap/Secret volumes (kept in step with the API while the pod runs)."""
        for volume in self.pod["spec"].get("volumes") or []:
            if "configMap" in volume or "secret" in volume:
                with contextlib.suppress(ConfigError):
                    self._volume_dir(volume)

    # ---- status ----------------------------------------------------------------------------
    def status(self) -> dict:
        containers = self.pod["spec"]["containers"]
        conditions = [
            ("PodScheduled", True),
            ("Initialized", self.init_done),
            ("ContainersReady", self.ready),
            ("Ready", self.ready),
        ]
        return {
            "phase": self.phase,
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "hostIP": self.ip,
            "startTime": self.start_time,
            "conditions": [{"type": t, "status": "True" if s else "False"} for t, s in conditions],
            "containerStatuses": [
                {
                    "name": containers[0]["name"],
                    "image": containers[0].get("image", ""),
                    "imageID": "",
                    "containerID": f"process://{self.process.pid}" if self.process else "",
                    "ready": self.ready,
                    "started": self.started,
                    "restartCount": self.restarts,
                    "state": self.state,
                    "lastState": self.last_state,
                }
            ],
        }

    async def write_status(self) -> None:
        status = self.status()
        if status == self._written:
            return
        try:
            await self.api.patch("pods", self.namespace, self.name, {"status": status}, sub="status")
            self._written = status
        except (ApiError, httpx.HTTPError) as e:
            log.debug("status of %s/%s not written: %s", self.namespace, self.name, e)

    # ---- lifecycle -------------------------------------------------------------------------
    async def _spawn(self, container: Mapping, log_name: str) -> asyncio.subprocess.Process:
        argv, env, cwd = self.process_config(container)
        self.dir.mkdir(parents=True, exist_ok=True)
        with (self.dir / f"{log_name}.log").open("ab") as out:
            out.write(f"--- {_now()} {' '.join(argv)}\n".encode())
            out.flush()
            return await asyncio.create_subprocess_exec(
                *argv, env=env, cwd=cwd, stdout=out, stderr=asyncio.subprocess.STDOUT, start_new_session=True
            )

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopped; True when stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)
        return self._stop.is_set()

    async def _wait_config(self, what: Callable[[], object]) -> object | None:
        """Retry ``what`` until its config resolves, reporting CreateContainerConfigError meanwhile."""
        while not self._stop.is_set():
            try:
                return what()
            except ConfigError as e:
                self.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}}
                await self.write_status()
                if await self._sleep(1.0):
                    return None
        return None

    async def _run_init(self) -> bool:
        for container in self.pod["spec"].get("initContainers") or []:
            while True:
                if await self._wait_config(lambda c=container: self.process_config(c)) is None:
                    return False
                proc = await self._spawn(container, container["name"])
                self.process = proc
                code = await proc.wait()
                self.process = None
                if code == 0:
                    break
                self.restarts += 1
                self.step += 1
                self.state = {
                    "waiting": {
                        "reason": "Init:CrashLoopBackOff",
                        "message": f"{container['name']} exited {code}",
                    }
                }
                await self.write_status()
                if await self._sleep(self.config.backoff.delay(self.step)):
                    return False
        self.init_done = True
        return True

    async def run(self) -> None:
        try:
            await self._run()
        except Exception:
            log.exception("pod %s/%s: runner failed", self.namespace, self.name)
            raise

    async def _run(self) -> None:
        containers = self.pod["spec"]["containers"]
        if len(containers) != 1:
            self.state = {
                "waiting": {"reason": "CreateContainerConfigError", "message": "one container per pod only"}
            }
            await self.write_status()
            return
        await self.write_status()
        if not await self._run_init():
            return
        container = containers[0]
        while not self._stop.is_set():
            if await self._wait_config(lambda: self.process_config(container)) is None:
                return
            try:
                probes = {
                    kind: Probe(container[kind], container, self.ip, self.config.probe_period_max_s)
                    for kind in ("startupProbe", "readinessProbe", "livenessProbe")
                    if kind in container
                }
            except ConfigError as e:
                self.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}}
                await self.write_status()
                return
            self._message_file().write_text("")
            self.process = await self._spawn(container, container["name"])
            started_at, begun = _now(), time.monotonic()
            self.phase, self.state = "Running", {"running": {"startedAt": started_at}}
            self.started = "startupProbe" not in probes
            self.ready = False
            for p in probes.values():
                p.start(begun)
            await self.write_status()
            reason = await self._supervise(probes, container)
            code = self.process.returncode
            message = self.termination_message(container) if code else ""
            self.last_state = {
                "terminated": {
                    "exitCode": code,
                    "reason": reason,
                    **({"message": message} if message else {}),
                    "startedAt": started_at,
                    "finishedAt": _now(),
                    "containerID": f"process://{self.process.pid}",
                }
            }
            self.ready = self.started = False
            if self._stop.is_set():
                break
            self.restarts += 1
            self.step = self.config.backoff.next_step(self.step, time.monotonic() - begun)
            delay = self.config.backoff.delay(self.step)
            self.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {delay:g}s restarting failed "
                    f"container={container['name']} pod={self.name}",
                }
            }
            self.process = None
            await self.write_status()
            if await self._sleep(delay):
                break

    async def _supervise(self, probes: dict[str, Probe], container: Mapping) -> str:
        """Until the process exits (or is killed for failing probes): the termination reason."""
        assert self.process is not None
        last_refresh = 0.0
        while True:
            if self.process.returncode is not None or self._stop.is_set():
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.process.wait(), timeout=0.25)
                break
            now = time.monotonic()
            if now - last_refresh >= 1.0:
                self.refresh_volumes()
                last_refresh = now
            if not self.started:
                startup = probes["startupProbe"]
                if await startup.check(self.http, now) is not None:
                    if startup.successes >= startup.successes_needed:
                        self.started = True
                        for kind in ("readinessProbe", "livenessProbe"):
                            if kind in probes:
                                probes[kind].start(now)
                    elif startup.failures >= startup.failures_allowed:
                        await self._terminate()
                        return "StartupProbeFailed"
                await self.write_status()
                continue
            readiness = probes.get("readinessProbe")
            if readiness is None:
                self.ready = True
            elif await readiness.check(self.http, now) is not None:
                if readiness.successes >= readiness.successes_needed:
                    self.ready = True
                elif readiness.failures >= readiness.failures_allowed:
                    self.ready = False
            liveness = probes.get("livenessProbe")
            checked = liveness is not None and await liveness.check(self.http, now) is not None
            if checked and liveness.failures >= liveness.failures_allowed:
                await self._terminate()
                return "LivenessProbeFailed"
            await self.write_status()
        if self._stop.is_set() and self.process.returncode is None:
            await self._terminate()
        code = self.process.returncode
        return "Completed" if code == 0 else ("Error" if code is not None and code > 0 else "Killed")

    async def _terminate(self) -> None:
        """SIGTERM to the process group, SIGKILL after the grace period."""
        proc = self.process
        if proc is None or proc.returncode is not None:
            return
        grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()

    async def stop(self) -> None:
        self._stop.set()
        await self._terminate()
        await self.http.aclose()
