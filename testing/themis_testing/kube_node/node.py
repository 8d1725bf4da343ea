"""The node: polls the API and drives the StatefulSet controller, the kubelet and the proxies.

One loop (every ``interval_s``) lists StatefulSets, pods, PVCs, ConfigMaps, Secrets and
Services, then:

1. StatefulSet controller (``statefulset``): creates PVCs and pods, deletes surplus or
   outdated pods, writes ``status``; deletes pods whose owning StatefulSet is gone (the
   emulator has no garbage collector);
2. PVCs: binds each (``status.phase: Bound``) to a directory; removes the directories of
   deleted claims once no process uses them;
3. kubelet: a ``PodRunner`` per pod; a pod deleted from the API has its process stopped, and a
   pod recreated under the same name waits for its predecessor to stop (same address, port);
4. Services with a selector get a ``PortProxy`` per port on their own address;
5. /etc/hosts gets the pod and Service names (``addresses``).

Polling rather than watching keeps the node small and restart-safe; the API is local.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from . import statefulset as sts_rules
from .addresses import Addresses, HostsFile, pod_names, service_names
from .backoff import Backoff
from .client import Api, ApiError
from .kubelet import Cache, KubeletConfig, PodRunner
from .service_proxy import PortProxy, endpoints
from .statefulset import decide

log = logging.getLogger("kube_node")


class NodeSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_KUBE_NODE_", extra="ignore")

    node_name: str = "themis-node"
    interval_s: float = Field(0.5, gt=0)
    backoff_initial_s: float = Field(10.0, gt=0)
    backoff_max_s: float = Field(300.0, gt=0)
    #: probe at least this often (None: the pods' own periodSeconds)
    probe_period_max_s: float | None = Field(None, gt=0)
    #: the pods' /24 (``127.A.B``); None picks one at random
    subnet: str | None = None
    hosts_file: Path = Path("/etc/hosts")


class Node:
    def __init__(self, api: Api, settings: NodeSettings, kubelet: KubeletConfig, hosts: HostsFile) -> None:
        self.api, self.settings, self.kubelet, self.hosts = api, settings, kubelet, hosts
        self.addresses = Addresses(settings.subnet)
        self.cache = Cache()
        self.runners: dict[tuple[str, str], tuple[PodRunner, asyncio.Task]] = {}
        self.stopping: dict[tuple[str, str], asyncio.Task] = {}
        self.proxies: dict[tuple[str, str, int], PortProxy] = {}
        self._stop = asyncio.Event()

    @staticmethod
    def backoff(settings: NodeSettings) -> Backoff:
        return Backoff(initial_s=settings.backoff_initial_s, max_s=settings.backoff_max_s)

    async def run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    await self.tick()
                except Exception:  # one bad tick (API restarting, a race) must not end the node
                    log.exception("node tick failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self.settings.interval_s)
        finally:
            await self.shutdown()

    def stop(self) -> None:
        self._stop.set()

    async def tick(self) -> None:
        sets, pods, claims, cms, secrets, services = await asyncio.gather(
            *(
                self.api.list(p)
                for p in (
                    "statefulsets",
                    "pods",
                    "persistentvolumeclaims",
                    "configmaps",
                    "secrets",
                    "services",
                )
            )
        )
        key = lambda o: (o["metadata"]["namespace"], o["metadata"]["name"])  # noqa: E731
        self.cache.configmaps = {key(o): o for o in cms}
        self.cache.secrets = {key(o): o for o in secrets}
        self.cache.claims = {key(o): o for o in claims}
        await self.control_statefulsets(sets, pods, claims)
        await self.bind_claims(claims)
        await self.run_pods(pods)
        await self.proxy_services(services, pods)
        self.write_hosts(pods, services)

    # ---- 1. StatefulSet controller --------------------------------------------------------
    async def control_statefulsets(self, sets: list[dict], pods: list[dict], claims: list[dict]) -> None:
        uids = {s["metadata"]["uid"] for s in sets}
        for pod in pods:
            owner = next(
                (o for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")), None
            )
            if owner and owner.get("kind") == "StatefulSet" and owner["uid"] not in uids:
                await self.api.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
        for sts in sets:
            ns = sts["metadata"]["namespace"]
            if problems := sts_rules.problems(sts):
                log.warning("statefulset %s/%s not run: %s", ns, sts["metadata"]["name"], "; ".join(problems))
                continue
            owned = [
                p
                for p in pods
                if p["metadata"]["namespace"] == ns
                and any(
                    o.get("uid") == sts["metadata"]["uid"] for o in p["metadata"].get("ownerReferences") or []
                )
            ]
            step = decide(
                sts, owned, [c["metadata"]["name"] for c in claims if c["metadata"]["namespace"] == ns]
            )
            for claim in step.create_claims:
                await self._create("persistentvolumeclaims", ns, claim)
            for pod in step.create_pods:
                pod["spec"]["nodeName"] = self.settings.node_name
                await self._create("pods", ns, pod)
            for name in step.delete_pods:
                await self.api.delete("pods", ns, name)
            status = sts_rules.status(sts, owned)
            if {k: (sts.get("status") or {}).get(k) for k in status} != status:
                with contextlib.suppress(ApiError):
                    await self.api.patch(
                        "statefulsets", ns, sts["metadata"]["name"], {"status": status}, sub="status"
                    )

    async def _create(self, plural: str, namespace: str, body: dict) -> None:
        try:
            await self.api.create(plural, namespace, body)
        except ApiError as e:
            if e.status != 409:  # created meanwhile: the next tick sees it
                raise

    # ---- 2. PVCs ---------------------------------------------------------------------------
    async def bind_claims(self, claims: list[dict]) -> None:
        for claim in claims:
            if (claim.get("status") or {}).get("phase") != "Bound":
                meta = claim["metadata"]
                size = claim["spec"].get("resources", {}).get("requests", {}).get("storage", "0")
                with contextlib.suppress(ApiError):
                    await self.api.patch(
                        "persistentvolumeclaims",
                        meta["namespace"],
                        meta["name"],
                        {
                            "status": {
                                "phase": "Bound",
                                "accessModes": claim["spec"].get("accessModes", []),
                                "capacity": {"storage": size},
                            }
                        },
                        sub="status",
                    )
        live = {f"{c['metadata']['name']}-{c['metadata']['uid'][:8]}" for c in claims}
        in_use = {d for runner, _ in self.runners.values() for d in runner.claim_dirs}
        in_use |= {d for key in self.stopping for d in self._claim_dirs_of(key)}
        volumes = self.kubelet.root / "volumes"
        for ns_dir in volumes.glob("*") if volumes.exists() else []:
            for d in ns_dir.iterdir():
                if d.name not in live and d not in in_use:
                    shutil.rmtree(d, ignore_errors=True)

    def _claim_dirs_of(self, key: tuple[str, str]) -> set[Path]:
        return getattr(self.stopping[key], "claim_dirs", set())

    # ---- 3. kubelet ------------------------------------------------------------------------
    async def run_pods(self, pods: list[dict]) -> None:
        seen = {}
        for pod in pods:
            if pod["spec"].get("nodeName") not in (None, self.settings.node_name):
                continue
            meta = pod["metadata"]
            key = (meta["namespace"], meta["name"])
            seen[key] = pod
            current = self.runners.get(key)
            if current and current[0].uid != meta["uid"]:
                self._retire(key)
                current = None
            if meta.get("deletionTimestamp"):
                if current:
                    self._retire(key)
                continue
            if current:
                current[0].pod = pod  # the latest spec (volumes are re-read from it)
                continue
            if key in self.stopping and not self.stopping[key].done():
                continue  # its predecessor is still shutting down
            self.stopping.pop(key, None)
            ip = self.addresses.get("pod", *key)
            runner = PodRunner(pod, ip, self.kubelet, self.cache, self.api)
            self.runners[key] = (runner, asyncio.create_task(runner.run(), name=f"pod {key}"))
        for key in [k for k in self.runners if k not in seen]:
            self._retire(key)
        for key in [k for k, t in self.stopping.items() if t.done() and k not in seen]:
            del self.stopping[key]
            self.addresses.release("pod", *key)

    def _retire(self, key: tuple[str, str]) -> None:
        runner, task = self.runners.pop(key)

        async def stop() -> None:
            await runner.stop()
            with contextlib.suppress(Exception):
                await task

        retiring = asyncio.create_task(stop(), name=f"stop {key}")
        retiring.claim_dirs = runner.claim_dirs  # type: ignore[attr-defined]
        self.stopping[key] = retiring

    # ---- 4. Services -----------------------------------------------------------------------
    async def proxy_services(self, services: list[dict], pods: list[dict]) -> None:
        wanted = set()
        for svc in services:
            meta, spec = svc["metadata"], svc["spec"]
            if spec.get("clusterIP") == "None" or not spec.get("selector"):
                continue
            address = self.addresses.get("svc", meta["namespace"], meta["name"])
            for port in spec.get("ports") or []:
                key = (meta["namespace"], meta["name"], int(port["port"]))
                wanted.add(key)
                proxy = self.proxies.get(key)
                if proxy is None:
                    proxy = PortProxy(address, int(port["port"]))
                    try:
                        await proxy.start()
                    except OSError as e:
                        log.warning(
                            "service %s/%s port %s: %s", meta["namespace"], meta["name"], port["port"], e
                        )
                        continue
                    self.proxies[key] = proxy
                proxy.backends = endpoints(svc, pods, port)
        for key in [k for k in self.proxies if k not in wanted]:
            await self.proxies.pop(key).stop()
            if not any(k[:2] == key[:2] for k in self.proxies):
                self.addresses.release("svc", key[0], key[1])

    # ---- 5. names --------------------------------------------------------------------------
    def write_hosts(self, pods: list[dict], services: list[dict]) -> None:
        entries = []
        for pod in pods:
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            spec = pod["spec"]
            if key in self.runners and spec.get("hostname") and spec.get("subdomain"):
                entries.append(
                    (self.runners[key][0].ip, pod_names(spec["hostname"], spec["subdomain"], key[0]))
                )
        for ns, name in {(k[0], k[1]) for k in self.proxies}:
            entries.append((self.addresses.get("svc", ns, name), service_names(name, ns)))
        self.hosts.write(entries)

    async def shutdown(self) -> None:
        for key in list(self.runners):
            self._retire(key)
        if self.stopping:
            await asyncio.gather(*self.stopping.values(), return_exceptions=True)
        for proxy in self.proxies.values():
            await proxy.stop()
        self.proxies.clear()
        self.hosts.clear()
        await self.api.close()
