"""The local Kubernetes: API emulator + node + operator as background processes.

``make kube-up`` runs ``python -m themis_testing.kube_node.stack up``: it starts the three
processes (pids in ``DIR/pids.json``, logs ``DIR/*.log``, the node's pods under ``DIR/node``)
and writes ``DIR/kubeconfig``; ``kube-down`` stops them (operator, node — which stops its
pods — then the emulator). Tests use :class:`Stack` as a context manager.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from ..ports import free_port as _free_port

REPO = Path(__file__).resolve().parents[3]
DEFAULT_DIR = REPO / ".themis" / "kube"


class Stack:
    def __init__(
        self,
        directory: Path,
        *,
        node_env: dict[str, str] | None = None,
        operator_env: dict[str, str] | None = None,
        operator_args: tuple[str, ...] = ("-A",),
        operator: bool = True,
        port: int | None = None,
        kubeconfig: Path | None = None,
        dockerfile: Path | None = None,
    ) -> None:
        """``kubeconfig``: use that API server (e.g. an in-process emulator) instead of starting one;
        ``dockerfile``: what the node's image holds (default: the repository's Dockerfile.shard)."""
        self.dir = directory
        self._kubeconfig, self.dockerfile = kubeconfig, dockerfile
        self.node_env, self.operator_env = node_env or {}, operator_env or {}
        self.operator_args, self.with_operator = operator_args, operator
        self.port = port or _free_port()
        self.procs: dict[str, subprocess.Popen] = {}

    @property
    def kubeconfig(self) -> Path:
        return self._kubeconfig or self.dir / "kubeconfig"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        path = os.pathsep.join(str(REPO / p) for p in ("shard", "operator", "testing"))
        return {**os.environ, **extra, "PYTHONPATH": path}

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        log = (self.dir / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=self._env(env), cwd=REPO, start_new_session=True
        )

    def start(self) -> Stack:
        self.dir.mkdir(parents=True, exist_ok=True)
        py = sys.executable
        if self._kubeconfig is None:
            emulator = [
                "-m",
                "themis_testing.emulator",
                "--port",
                str(self.port),
                "--kubeconfig",
                str(self.kubeconfig),
            ]
            self._spawn("emulator", [py, *emulator], {})
            self._wait(
                lambda: self.kubeconfig.exists() and httpx.get(f"{self.url}/version", timeout=1).is_success
            )
        node = [
            "-m",
            "themis_testing.kube_node",
            "--kubeconfig",
            str(self.kubeconfig),
            "--root",
            str(self.dir / "node"),
        ]
        if self.dockerfile:
            node += ["--dockerfile", str(self.dockerfile)]
        self._spawn("node", [py, *node], self.node_env)
        if self.with_operator:
            self.start_operator()
        self._write_pids()
        return self

    def start_operator(self) -> None:
        """Start the operator (``start`` does unless built with ``operator=False``: a test that
        needs its resources in place before the operator's first look starts it itself)."""
        self._spawn(
            "operator",
            [
                sys.executable,
                "-m",
                "themis_operator",
                "--kubeconfig",
                str(self.kubeconfig),
                *self.operator_args,
            ],
            self.operator_env,
        )
        self._write_pids()

    def _write_pids(self) -> None:
        (self.dir / "pids.json").write_text(json.dumps({n: p.pid for n, p in self.procs.items()}))

    def _wait(self, check, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, OSError):
                if check():
                    return
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {proc.returncode}: see {self.dir / (name + '.log')}"
                    )
            time.sleep(0.2)
        raise TimeoutError("the Kubernetes emulator did not come up")

    def stop(self) -> None:
        stop_pids({n: p.pid for n, p in self.procs.items()})
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        (self.dir / "pids.json").unlink(missing_ok=True)

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child counts as gone.
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    return True


def stop_pids(pids: dict[str, int], grace_s: float = 90) -> None:
    """SIGTERM in order operator → node → emulator, each waited for (then SIGKILL)."""
    for name in ("operator", "node", "emulator"):
        pid = pids.get(name)
        if pid is None or not _alive(pid):
            continue
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="themis-kube")
    ap.add_argument("command", choices=["up", "down"])
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--port", type=int, default=None)
    args = ap.parse_args(argv)
    args.dir = args.dir.resolve()
    pids_file = args.dir / "pids.json"
    if args.command == "down":
        if not pids_file.exists():
            print("nothing to stop")
            return
        stop_pids(json.loads(pids_file.read_text()))
        pids_file.unlink()
        print("kube stack stopped")
        return
    if pids_file.exists() and any(_alive(p) for p in json.loads(pids_file.read_text()).values()):
        raise SystemExit(f"already running (see {pids_file}); make kube-down first")
    stack = Stack(args.dir, port=args.port).start()
    print(f"API {stack.url}\nkubeconfig {stack.kubeconfig}\nlogs {args.dir}/{{emulator,node,operator}}.log")
    print(f"export KUBECONFIG={stack.kubeconfig}")


if __name__ == "__main__":
    main()
