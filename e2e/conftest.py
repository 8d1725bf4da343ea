"""Helpers for end-to-end tests: real shard processes on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from themis_testing.ports import free_port

#: The gossip secret of the e2e clusters: it also signs their /internal/... calls.
E2E_SECRET = "e2e-secret"
#: The shards' log level (their logs lie next to their data): raise it to read a failure.
SHARD_LOG_LEVEL = os.environ.get("THEMIS_E2E_SHARD_LOG_LEVEL", "warning")


def peer_auth(secret: str = E2E_SECRET):
    """An httpx ``auth=`` that signs a test's direct /internal/... calls as a cluster peer."""
    from themis_shard.cluster.security.peer_auth import PeerAuth

    return PeerAuth(secret, "e2e-test")


@contextmanager
def shard_process(
    data_dir: Path,
    port: int,
    shard_id: str = "shard-0",
    llm: bool = False,
    extra_env: dict[str, str] | None = None,
    ready_timeout: float = 60,
) -> Iterator[subprocess.Popen]:
    """A real `python -m themis_shard` process; killed (SIGKILL) on exit if still running."""
    env = {
        **os.environ,
        "THEMIS_SHARD_ID": shard_id,
        "THEMIS_PORT": str(port),
        "THEMIS_DATA_DIR": str(data_dir),
        "THEMIS_LLM_ENABLED": "true" if llm else "false",
        **(extra_env or {}),
    }
    log_path = data_dir.parent / f"{shard_id}-{port}.log"
    log = open(log_path, "ab")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [sys.executable, "-m", "themis_shard", "--log-level", SHARD_LOG_LEVEL],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}", ready_timeout, proc, log_path)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def wait_ready(
    url: str, timeout: float, proc: subprocess.Popen | None = None, log: Path | None = None
) -> None:
    """Until ``url``'s /ready answers 200; a timeout says what the shard reports of itself and
    ends with its log's tail (``log``), so a failure on a CI machine can be read afterwards."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"shard exited with {proc.returncode} during start-up{_tail(log)}")
        try:  # /ready is a probe: its status code is the answer, as for the kubelet
            if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready after {timeout}s{_said_by(url, log, proc)}")


def _said_by(url: str, log: Path | None, proc: subprocess.Popen | None = None) -> str:
    """What a shard that is not ready says of itself; where it is alive, its state (R, S, T:
    stopped, D: in the kernel) and, in its log, every thread's stack (SIGUSR1: faulthandler)."""
    out = []
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(OSError, IndexError):
            state = Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[0]
            out.append(f"process {proc.pid} state: {state}")
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGUSR1)
            time.sleep(1)
    for path in ("/health", "/v1/cluster/status"):
        try:
            out.append(f"{path}: {httpx.get(url + path, timeout=5).text[:4000]}")
        except httpx.HTTPError as exc:
            out.append(f"{path}: {type(exc).__name__}: {exc}")
    return "\n" + "\n".join(out) + _tail(log)


def _tail(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    tail = log.read_text(errors="replace").splitlines()[-400:]
    return f"\nlast lines of {log.name}:\n" + "\n".join(tail)


def run_themis(
    *args: str, cwd: Path, env: dict | None = None, timeout: float = 240
) -> subprocess.CompletedProcess:
    """The `themis` CLI (``themis_shard.local_cluster``) run in ``cwd``, with ``env`` added."""
    return subprocess.run(
        [sys.executable, "-m", "themis_shard.local_cluster", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def spawn_shard():
    """The :func:`shard_process` context manager, for tests to start real shards."""
    return shard_process


@pytest.fixture
def port() -> int:
    return free_port()


class LocalCluster:
    """N real shard processes sharing one plan file; shards can be killed and restarted."""

    def __init__(
        self,
        root: Path,
        n: int,
        raid_mode: str = "raid1",
        llm: bool = False,
        router: dict | None = None,
        env: dict[str, str] | None = None,
        adapters: tuple = (),
        shard_env: dict[str, dict[str, str]] | None = None,
        failover=None,
        log_level: str = SHARD_LOG_LEVEL,
    ) -> None:
        """``env``: for every shard; ``shard_env``: shard id → more, for that shard only;
        ``failover``: the plan's ``FailoverSettings`` (a test then runs the authority itself);
        ``log_level``: the shards' (their logs are ``root/<shard>.log``)."""
        from themis_core.plan import ClusterSpec, Member, RouterSettings, build_plan

        self.root = root
        self.ports = [free_port() for _ in range(n)]
        self.ids = [f"shard-{i}" for i in range(n)]
        members = tuple(
            Member(shard_id=sid, url=f"http://127.0.0.1:{p}")
            for sid, p in zip(self.ids, self.ports, strict=True)
        )
        self.plan = build_plan(
            ClusterSpec(
                name="e2e",
                members=members,
                raid_mode=raid_mode,
                router=RouterSettings(**(router or {})),
                adapters=adapters,
                failover=failover,
            )
        )
        self.env = env or {}
        self.shard_env = shard_env or {}
        self.plan_path = root / "plan.json"
        self.plan_path.write_text(self.plan.to_json())
        self.llm = llm
        self.log_level = log_level
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs: list = []

    def url(self, shard_id: str) -> str:
        return f"http://127.0.0.1:{self.ports[self.ids.index(shard_id)]}"

    def log_path(self, shard_id: str) -> Path:
        return self.root / f"{shard_id}.log"

    def wait_ready(self, shard_id: str, timeout: float = 120) -> None:
        wait_ready(self.url(shard_id), timeout, self.procs[shard_id], self.log_path(shard_id))

    def start(self, shard_id: str, wait: bool = True) -> subprocess.Popen:
        i = self.ids.index(shard_id)
        env = {
            **os.environ,
            "THEMIS_SHARD_ID": shard_id,
            "THEMIS_PORT": str(self.ports[i]),
            "THEMIS_DATA_DIR": str(self.root / shard_id),
            "THEMIS_PLAN_PATH": str(self.plan_path),
            "THEMIS_LLM_ENABLED": "true" if self.llm else "false",
            "THEMIS_CLUSTER_GOSSIP_SECRET": E2E_SECRET,
            "THEMIS_CLUSTER_GOSSIP_INTERVAL_S": "0.3",
            "THEMIS_CLUSTER_GOSSIP_EXCHANGE_TIMEOUT_S": "2",
            "THEMIS_CLUSTER_SUSPECT_TIMEOUT_S": "3",
            "THEMIS_CLUSTER_DEAD_TIMEOUT_S": "10",
            **self.env,
            **self.shard_env.get(shard_id, {}),
        }
        log = open(self.log_path(shard_id), "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        proc = subprocess.Popen(
            [sys.executable, "-m", "themis_shard", "--log-level", self.log_level],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.procs[shard_id] = proc
        if wait:
            self.wait_ready(shard_id)
        return proc

    def start_all(self) -> None:
        for sid in self.ids:
            self.start(sid, wait=False)
        for sid in self.ids:
            self.wait_ready(sid)

    def kill(self, shard_id: str) -> None:
        proc = self.procs.pop(shard_id)
        proc.kill()
        proc.wait()

    def stop(self) -> None:
        for sid in list(self.procs):
            self.kill(sid)
        for log in self._logs:
            log.close()


class Authority:
    """The plan authority's loop (``supervisor.local_authority``) in a thread of the test, as
    ``themis up`` runs it in a process; it never restarts shards (the test does)."""

    def __init__(self, plans) -> None:
        from themis_shard.supervisor import local_authority

        self.supervisor = local_authority(plans, E2E_SECRET)
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name="plan-authority", daemon=True)

    @classmethod
    def of(cls, cluster: LocalCluster) -> Authority:
        from themis_shard.supervisor import FilePlan

        return cls(FilePlan(cluster.plan_path))

    def _run(self) -> None:
        self._loop.run_until_complete(self.supervisor.run(self._stop))
        self._loop.close()

    def __enter__(self) -> Authority:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def plan(self):
        return self.supervisor.plans.read()


@pytest.fixture
def local_cluster(tmp_path):
    clusters: list[LocalCluster] = []

    def make(n: int = 3, raid_mode: str = "raid1", llm: bool = False, **kw) -> LocalCluster:
        cluster = LocalCluster(tmp_path, n, raid_mode, llm, **kw)
        clusters.append(cluster)
        cluster.start_all()
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop()
