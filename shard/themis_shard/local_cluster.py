"""``themis``: run a local cluster of real shard processes on loopback (the embedded mode).

``themis up`` builds the cluster plan with the same pure function the operator uses, writes it
to ``.themis/plan.json``, starts one ``themis_shard`` process per member, waits until every
shard answers ``/ready``, prints ``<shard_id> <url>`` lines (also written to
``.themis/cluster.json``) and returns with the shards running in the background.
``themis down`` stops them (SIGTERM, then SIGKILL after a grace period).

With two shards or more (and no ``--tls``) it also starts the local plan authority
(``supervisor.py``): it fails a dead shard's keys over to their in-sync copies within seconds,
restarts the shard, and readmits it once it caught up (``plan_authority.in_sync``). ``themis down`` stops it
before the shards.

Why one ~790-line module: it is the ``themis`` CLI's commands (up, scale, down, status, demo)
over one state directory and one parser; the plan, the supervisor and the certificates live
elsewhere.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
from rich.console import Console
from themis_core.api_keys import bearer_headers
from themis_core.plan import ClusterPlan, ClusterSpec, FailoverSettings, Member, RouterSettings, build_plan

from . import __version__
from .backup.cli import (  # themis backup, up --restore-from
    RESTORE_TIMEOUT_S,
    add_backup_commands,
    prepare_restore,
)
from .cli_help import COMMANDS, DESCRIPTION
from .cli_progress import ScaleView, StartupView, migration_summary, moved_fraction
from .cluster.transactions.cli import add_txn_commands  # themis txn list/resolve
from .llm import host_cores  # the host's cores, shared by demand by the shards it starts
from .local_auth import resolve_api_key, write_local_keys
from .raid.cli import add_raid_commands  # themis raid status/verify/rebuild/ingest
from .training.cli import add_adapter_commands  # themis adapters federate

STATE_DIR = Path(".themis")


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def pick_ports(host: str, base: int, count: int) -> list[int]:
    """``count`` free ports from ``base`` upwards (0: any free ports the OS hands out)."""
    ports: list[int] = []
    candidate = base
    while len(ports) < count:
        if base == 0:
            with socket.socket() as s:
                s.bind((host, 0))
                ports.append(s.getsockname()[1])
            continue
        if candidate > 65535:
            raise SystemExit(f"no {count} free ports at or above {base}")
        if _port_free(host, candidate):
            ports.append(candidate)
        candidate += 1
    return ports


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, as a container's cpuset sets it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def engine_threads(cores: int, engines: int) -> int:
    """Threads per engine so that ``engines`` model copies on one host share its ``cores``
    instead of each assuming all of them (spinning llama.cpp threads on shared cores lose far
    more than they gain)."""
    return max(1, cores // max(1, engines))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as dead.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _read_state(state_dir: Path) -> dict | None:
    path = state_dir / "cluster.json"
    return json.loads(path.read_text()) if path.exists() else None


def _log_tail(path: str | None, lines: int = 6) -> str:
    """The end of a shard's log: what it said before it died (a start-up error names its cause)."""
    try:
        tail = Path(path).read_text(errors="replace").strip().splitlines()[-lines:] if path else []
    except OSError:
        return ""
    return "\n".join("    " + line for line in tail)


_NOT_A_CAUSE = ("Application startup failed", "Waiting for application", "Traceback", "During handling")


def start_failure_cause(log_text: str) -> str:
    """The line of a dead shard's log that says why it died: the last exception or error line
    (uvicorn's own "startup failed" epilogue is not the cause), else its last line."""
    lines = [line.strip() for line in log_text.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if any(marker in line for marker in _NOT_A_CAUSE):
            continue
        head = line.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Exit")) or " ERROR " in f" {line} ":
            return line[:400]
    return lines[-1][:400] if lines else "it exited without writing to its log"


def start_failure(shard_id: str, log: str | None, what: str = "exited during start-up") -> str:
    """One line naming the shard, the cause and the log file, then the log's tail."""
    try:
        text = Path(log).read_text(errors="replace") if log else ""
    except OSError:
        text = ""
    where = log or ".themis/logs/"
    return f"{shard_id} {what}: {start_failure_cause(text)} (log: {where})" + (
        f"\n{_log_tail(log)}" if text else ""
    )


def wait_ready(
    urls: list[str],
    timeout: float,
    pids: list[int] | None = None,
    verify: str | bool = True,
    logs: list[str] | None = None,
    view: StartupView | None = None,
    shard_ids: list[str] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    pending = list(urls)
    ids = dict(zip(urls, shard_ids or urls, strict=True))
    log_of = dict(zip(urls, logs or [None] * len(urls), strict=True))
    context = ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify
    with httpx.Client(timeout=2.0, verify=context) as client:
        while pending:
            if time.monotonic() > deadline:
                raise SystemExit(
                    "\n".join(
                        start_failure(ids[url], log_of[url], f"not ready after {timeout:.0f} s")
                        for url in pending
                    )
                )
            dead = [i for i, p in enumerate(pids or []) if not _alive(p)]
            if dead:
                url = urls[dead[0]]
                if view is not None:
                    view.mark(ids[url], "exited")
                raise SystemExit(start_failure(ids[url], log_of[url]))
            for url in list(pending):
                try:
                    if client.get(f"{url}/ready").status_code == 200:
                        pending.remove(url)
                        if view is not None:
                            view.mark(ids[url], "ready")
                except httpx.HTTPError:
                    pass
            if pending:
                time.sleep(0.2)


def start_shard(
    state_dir: Path,
    plan_path: Path,
    launch: dict,
    member: Member,
    tls_env: dict[str, str],
) -> dict:
    """Start one shard process in the background (its own session: `make up` returns)."""
    data_dir = Path(launch["data_root"]) / member.shard_id
    log_path = (state_dir / "logs" / f"{member.shard_id}.log").resolve()
    port = int(member.url.rsplit(":", 1)[1])
    env = {
        **os.environ,
        "THEMIS_SHARD_ID": member.shard_id,
        "THEMIS_HOST": launch["host"],
        "THEMIS_PORT": str(port),
        "THEMIS_DATA_DIR": str(data_dir),
        "THEMIS_PLAN_PATH": str(plan_path),
        "THEMIS_CLUSTER_GOSSIP_SECRET": launch["gossip_secret"],
        **tls_env,
    }
    if launch.get("auth"):
        env.update(write_local_keys(state_dir))
    if member.internal_url:
        env["THEMIS_INTERNAL_PORT"] = member.internal_url.rsplit(":", 1)[1]
    if launch["no_llm"]:
        env["THEMIS_LLM_ENABLED"] = "false"
    elif launch.get("llm_threads") and "THEMIS_LLM_N_THREADS" not in os.environ:
        env["THEMIS_LLM_N_THREADS"] = str(launch["llm_threads"])  # the host's cores, shared
        if launch.get("host_cores_file"):  # ... and by demand: a lone busy engine takes them all
            if not Path(launch["host_cores_file"]).exists():
                host_cores.create(Path(launch["host_cores_file"]))
            env["THEMIS_LLM_HOST_CORES"] = str(launch["host_cores"])
            env["THEMIS_LLM_HOST_CORES_FILE"] = launch["host_cores_file"]
    if launch.get("raid_weights"):
        env["THEMIS_RAID_ENABLED"] = "true"  # model weights striped with parity across the shards
    if launch.get("restore_from"):
        env["THEMIS_RESTORE_FROM"] = launch["restore_from"]  # each shard restores its part on first start
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "themis_shard"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return {
        "shard_id": member.shard_id,
        "url": member.url,
        "pid": proc.pid,
        "data_dir": str(data_dir),
        "log": str(log_path),
    }


def wait_leased(urls: list[str], timeout: float, verify: str | bool = True) -> None:
    """Until every shard holds its lease from the plan authority (``/health``'s ``lease_s``):
    before that a primary refuses (503 ``lease_expired``), so ``up`` returns once they serve."""
    deadline = time.monotonic() + timeout
    pending = list(urls)
    with httpx.Client(timeout=2.0, verify=verify) as client:
        while pending:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"the plan authority granted no lease to {', '.join(pending)} in {timeout:.0f}s"
                )
            for url in list(pending):
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    if client.get(f"{url}/health").json().get("lease_s", 1) > 0:
                        pending.remove(url)
            if pending:
                time.sleep(0.1)


def start_supervisor(state_dir: Path, restart: bool) -> int:
    """Start the plan authority (``python -m themis_shard.supervisor``) in the background."""
    log_path = (state_dir / "logs" / "supervisor.log").resolve()
    command = [sys.executable, "-m", "themis_shard.supervisor", "--state-dir", str(state_dir.resolve())]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            command + ([] if restart else ["--no-restart"]),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return proc.pid


def ensure_supervisor(state_dir: Path, state: dict) -> None:
    """(Re)start the cluster's supervisor when it has one and its process is gone."""
    sup = state.get("supervisor")
    if sup and not _alive(sup["pid"]):
        sup["pid"] = start_supervisor(state_dir, sup.get("restart", True))
        (state_dir / "cluster.json").write_text(json.dumps(state, indent=2))


def write_plan(path: Path, plan: ClusterPlan) -> None:
    """Atomically replace the plan file (shards watch it and must never read half of it)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(plan.to_json())
    os.replace(tmp, path)


def wait_migrated(
    urls: list[str],
    version: int,
    timeout: float,
    verify=True,
    want=("purged", "drained"),
    api_key: str | None = None,
    view: ScaleView | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=5.0, verify=verify, headers=bearer_headers(api_key)) as client:
        while True:
            statuses: dict[str, dict | None] = {}
            for url in urls:
                try:
                    statuses[url] = client.get(f"{url}/v1/cluster/status").json()
                except (httpx.HTTPError, ValueError):
                    statuses[url] = None
            moved, states = migration_summary(statuses, version)
            finished = all(s in want for s in states.values())
            if view is not None:
                view.update(moved, states, done=finished)
            if finished:
                return
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"handoff to ring version {version} not finished after {timeout:.0f}s: {states}"
                )
            time.sleep(0.3)


def stored_copies(urls: list[str], verify=True) -> int:
    """Documents stored on these shards, all collections, every copy (what a reshard pages)."""
    total = 0
    with httpx.Client(timeout=5.0, verify=verify) as client:
        for url in urls:
            with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
                total += sum(c.get("documents", 0) for c in client.get(f"{url}/v1/collections").json())
    return total


def _scale_view(args: argparse.Namespace, old: ClusterPlan, new: ClusterPlan, what: str) -> ScaleView:
    estimate = round(stored_copies([m.url for m in old.members]) * moved_fraction(old, new))
    names = {m.url: m.shard_id for m in (*old.members, *new.members)}
    return ScaleView(args.console, estimate, f"{what} → ring v{new.ring_version}", names)


def scale(args: argparse.Namespace) -> int:
    """Change the shard count of the running local cluster the way the operator does."""
    state_dir: Path = args.state_dir
    state = _read_state(state_dir)
    if not state:
        raise SystemExit("no local cluster is running (themis up first)")
    if state.get("ca"):
        raise SystemExit("themis scale does not support --tls clusters yet")
    plan_path = Path(state["plan"])
    plan = ClusterPlan.load(plan_path)
    launch = state["launch"]
    ring = list(plan.ring_spec.shards)
    if args.shards == len(ring):
        print(f"already {len(ring)} shard(s)")
        return 0
    members = list(plan.members)
    if args.shards > len(ring):
        used = {int(m.url.rsplit(":", 1)[1]) for m in members}
        ports = [p for p in pick_ports(launch["host"], max(used) + 1, args.shards - len(ring))]
        next_id = max(int(m.shard_id.rsplit("-", 1)[1]) for m in members) + 1
        added = [
            Member(shard_id=f"shard-{next_id + i}", url=f"http://{launch['host']}:{p}")
            for i, p in enumerate(ports)
        ]
        new_plan = build_plan(
            ClusterSpec(
                name=plan.cluster,
                members=(*members, *added),
                raid_mode=plan.raid_mode,
                vnodes=plan.ring_spec.vnodes,
                ring_seed=plan.ring_spec.seed,
            ),
            plan,
        )
        write_plan(plan_path, new_plan)
        for member in added:
            state["shards"].append(start_shard(state_dir, plan_path, launch, member, {}))
        (state_dir / "cluster.json").write_text(json.dumps(state, indent=2))
        wait_ready([m.url for m in added], args.timeout)
        with _scale_view(args, plan, new_plan, f"scale {len(ring)}→{args.shards}") as view:
            wait_migrated(
                [m.url for m in new_plan.members],
                new_plan.ring_version,
                args.timeout,
                view=view,
                api_key=args.api_key,
            )
        print(f"scaled out to {args.shards} shards (ring version {new_plan.ring_version})")
        return 0
    leaving = ring[args.shards :]
    draining_plan = build_plan(
        ClusterSpec(
            name=plan.cluster,
            members=tuple(members),
            draining=tuple(leaving),
            raid_mode=plan.raid_mode,
            vnodes=plan.ring_spec.vnodes,
            ring_seed=plan.ring_spec.seed,
        ),
        plan,
    )
    view = _scale_view(args, plan, draining_plan, f"drain {', '.join(leaving)}")
    write_plan(plan_path, draining_plan)
    with view:
        wait_migrated(
            [m.url for m in members],
            draining_plan.ring_version,
            args.timeout,
            view=view,
            api_key=args.api_key,
        )
    final = build_plan(
        ClusterSpec(
            name=plan.cluster,
            members=tuple(m for m in members if m.shard_id not in leaving),
            raid_mode=plan.raid_mode,
            vnodes=plan.ring_spec.vnodes,
            ring_seed=plan.ring_spec.seed,
        ),
        draining_plan,
    )
    write_plan(plan_path, final)
    for s in [s for s in state["shards"] if s["shard_id"] in leaving]:
        _stop([s["pid"]], args.grace)
        state["shards"].remove(s)
    (state_dir / "cluster.json").write_text(json.dumps(state, indent=2))
    print(
        f"scaled in to {args.shards} shards (ring version {final.ring_version}; drained {', '.join(leaving)})"
    )
    return 0


def _stop(pids: list[int], grace: float) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def write_certificates(directory: Path, shard_ids: list[str], host: str) -> dict[str, dict[str, str]]:
    """A cluster CA and one certificate per shard (for ``host``), as PEM files; returns each
    shard's TLS environment."""
    from themis_core.certificates import generate_ca, issue_shard_cert

    directory.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = generate_ca("local")
    (directory / "ca.crt").write_bytes(ca_cert)
    env = {}
    for shard_id in shard_ids:
        cert, key = issue_shard_cert(ca_cert, ca_key, shard_id, ["localhost", shard_id], ip_addresses=[host])
        (directory / f"{shard_id}.crt").write_bytes(cert)
        key_path = directory / f"{shard_id}.key"
        key_path.write_bytes(key)
        key_path.chmod(0o600)
        env[shard_id] = {
            "THEMIS_TLS_CA_PATH": str((directory / "ca.crt").resolve()),
            "THEMIS_TLS_CERT_PATH": str((directory / f"{shard_id}.crt").resolve()),
            "THEMIS_TLS_KEY_PATH": str(key_path.resolve()),
        }
    return env


def missing_shards(shards: list[dict], alive) -> list[str]:
    """The shards of a recorded cluster whose process is gone (``alive(pid)`` says)."""
    return [s["shard_id"] for s in shards if not alive(s["pid"])]


def tls_env_of(state_dir: Path, shard_id: str) -> dict[str, str]:
    """A shard's TLS environment from the certificates ``up --tls`` wrote."""
    tls = (state_dir / "tls").resolve()
    return {
        "THEMIS_TLS_CA_PATH": str(tls / "ca.crt"),
        "THEMIS_TLS_CERT_PATH": str(tls / f"{shard_id}.crt"),
        "THEMIS_TLS_KEY_PATH": str(tls / f"{shard_id}.key"),
    }


def restart_missing(args: argparse.Namespace, state: dict, missing: list[str]) -> int:
    """Start only the shards whose process died, with the recorded plan, launch settings and
    certificates (data directories are kept: they catch up from their peers)."""
    state_dir: Path = args.state_dir
    plan_path = Path(state["plan"])
    plan = ClusterPlan.load(plan_path)
    restarted = []
    for i, record in enumerate(state["shards"]):
        if record["shard_id"] not in missing:
            continue
        member = plan.member(record["shard_id"])
        tls = tls_env_of(state_dir, member.shard_id) if state.get("ca") else {}
        state["shards"][i] = start_shard(state_dir, plan_path, state["launch"], member, tls)
        restarted.append(state["shards"][i])
    (state_dir / "cluster.json").write_text(json.dumps(state, indent=2))
    ensure_supervisor(state_dir, state)
    print(f"restarting {', '.join(missing)} (the other shards kept running)", file=sys.stderr)
    try:
        wait_ready(
            [s["url"] for s in restarted],
            args.timeout,
            [s["pid"] for s in restarted],
            verify=state.get("ca") or True,
            logs=[s["log"] for s in restarted],
            shard_ids=[s["shard_id"] for s in restarted],
        )
        if state.get("supervisor"):
            wait_leased([s["url"] for s in restarted], args.timeout, verify=state.get("ca") or True)
    except SystemExit:
        _stop([s["pid"] for s in restarted if _alive(s["pid"])], args.grace)  # only what we started
        raise
    for s in state["shards"]:
        print(f"{s['shard_id']} {s['url']}")
    return 0


def up(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    state = _read_state(state_dir)
    alive = state and any(_alive(s["pid"]) for s in state["shards"])
    if args.restore_from:  # checked before anything starts: empty data root, a whole backup
        args.restore_from = prepare_restore(args.restore_from, args.data_root, args.console, bool(alive))
        args.timeout = max(args.timeout, RESTORE_TIMEOUT_S)  # shards are ready once restored
    if alive and bool(state["launch"].get("auth")) != args.auth:
        running = "with" if state["launch"].get("auth") else "without"
        raise SystemExit(f"the running cluster was started {running} --auth: themis down first")
    if state:
        missing = missing_shards(state["shards"], _alive)
        if not missing:
            ensure_supervisor(state_dir, state)
            print(f"all {len(state['shards'])} shards are already running", file=sys.stderr)
            for s in state["shards"]:
                print(f"{s['shard_id']} {s['url']}")
            return 0
        if len(missing) < len(state["shards"]):
            return restart_missing(args, state, missing)
        down(args)  # nothing left running: start afresh
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "logs").mkdir(exist_ok=True)
    ports = pick_ports(args.host, args.base_port, args.shards * (2 if args.tls else 1))
    internal_ports = ports[args.shards :] if args.tls else [None] * args.shards
    ports = ports[: args.shards]
    scheme = "https" if args.tls else "http"
    members = tuple(
        Member(
            shard_id=f"shard-{i}",
            url=f"{scheme}://{args.host}:{p}",
            internal_url=f"{scheme}://{args.host}:{ip}" if ip else None,
        )
        for i, (p, ip) in enumerate(zip(ports, internal_ports, strict=True))
    )
    try:
        router = RouterSettings(thresholds=tuple(args.thresholds)) if args.thresholds else RouterSettings()
    except ValueError as exc:
        raise SystemExit(f"--thresholds: {exc}") from None
    failover = args.failover and args.shards >= 2 and not args.tls
    try:
        spec = ClusterSpec(
            name="local",
            members=members,
            raid_mode=args.raid_mode,
            tls=args.tls,
            router=router,
            failover=FailoverSettings() if failover else None,
            min_insync=args.min_insync,
        )
    except ValueError as exc:
        raise SystemExit(f"themis up: {exc}") from None
    plan = build_plan(spec)
    tls_env = (
        write_certificates(state_dir / "tls", [m.shard_id for m in members], args.host) if args.tls else {}
    )
    plan_path = (state_dir / "plan.json").resolve()
    write_plan(plan_path, plan)
    launch = {
        "gossip_secret": secrets.token_hex(32),  # signs gossip; this cluster's shards only
        "host": args.host,
        "data_root": str(args.data_root.resolve()),
        "no_llm": args.no_llm,
        "raid_mode": args.raid_mode,
        "raid_weights": args.raid_weights,
        "auth": args.auth,
        "restore_from": args.restore_from,
        "llm_threads": None if args.no_llm else engine_threads(usable_cores(), args.shards),
    }
    if not args.no_llm and "THEMIS_LLM_N_THREADS" not in os.environ:
        cores = usable_cores()
        launch["host_cores"] = cores
        launch["host_cores_file"] = str((state_dir / "host-cores").resolve())
        host_cores.create(Path(launch["host_cores_file"]))
        print(
            f"themis up: {args.shards} model copies share {cores} cores by demand: a lone busy engine "
            f"computes on all {cores}, each of k busy ones on {cores} // k (at least 1; "
            "THEMIS_LLM_N_THREADS fixes the threads instead)"
            + ("; more shards than cores slow every one of them" if args.shards > cores else ""),
            file=sys.stderr,
        )
    shards = [
        start_shard(state_dir, plan_path, launch, member, tls_env.get(member.shard_id, {}))
        for member in members
    ]
    ca = str((state_dir / "tls" / "ca.crt").resolve()) if args.tls else None
    state = {"plan": str(plan_path), "ca": ca, "launch": launch, "shards": shards}
    (state_dir / "cluster.json").write_text(json.dumps(state, indent=2))
    if failover:  # probing (and granting leases) while the shards start
        restart = args.restart_dead
        state["supervisor"] = {"pid": start_supervisor(state_dir, restart), "restart": restart}
        (state_dir / "cluster.json").write_text(json.dumps(state, indent=2))
    try:
        with StartupView(args.console, [(s["shard_id"], s["url"]) for s in shards]) as view:
            wait_ready(
                [s["url"] for s in shards],
                args.timeout,
                [s["pid"] for s in shards],
                verify=ca or True,
                logs=[s["log"] for s in shards],
                view=view,
                shard_ids=[s["shard_id"] for s in shards],
            )
        if failover:
            wait_leased([s["url"] for s in shards], args.timeout)
    except SystemExit:
        down(args)
        raise
    for s in shards:
        print(f"{s['shard_id']} {s['url']}")
    if args.auth:
        keys = (state_dir / "auth").resolve()
        print(
            f"API keys on: admin key {keys / 'admin.key'}, client key {keys / 'client.key'} "
            f"(send Authorization: Bearer <key>; the themis CLI reads the admin key itself)",
            file=sys.stderr,
        )
    return 0


def down(args: argparse.Namespace) -> int:
    state = _read_state(args.state_dir)
    if not state:
        print("no local cluster is running")
        return 0
    sup = state.get("supervisor")
    if sup and _alive(sup["pid"]):  # first: it would restart the shards being stopped
        _stop([sup["pid"]], args.grace)
    state = _read_state(args.state_dir) or state  # the pids of shards it restarted
    _stop([s["pid"] for s in state["shards"] if _alive(s["pid"])], args.grace)
    (args.state_dir / "cluster.json").unlink(missing_ok=True)
    print(f"stopped {len(state['shards'])} shard(s)")
    return 0


def status(args: argparse.Namespace) -> int:
    """Exit status: 0 every shard ok, 1 any shard degraded or down, or no cluster running."""
    state = _read_state(args.state_dir)
    if not state:
        print(json.dumps({"running": False, "shards": []}) if args.json else "no local cluster is running")
        return 1
    verify = ssl.create_default_context(cafile=state["ca"]) if state.get("ca") else True
    rows = []
    with httpx.Client(timeout=2.0, verify=verify) as client:
        for s in state["shards"]:
            try:
                health = client.get(f"{s['url']}/health").json()
            except (httpx.HTTPError, ValueError):
                health = {"status": "down"}
            rows.append({"shard_id": s["shard_id"], "url": s["url"], "pid": s["pid"], **health})
    plan = ClusterPlan.load(state["plan"])
    sup = state.get("supervisor")
    isr = {
        "epoch": plan.plan_epoch,
        "out_of_sync": list(plan.out_of_sync),
        "rejoining": list(plan.rejoining),
        "supervisor": ("running" if _alive(sup["pid"]) else "down") if sup else "off",
    }
    if args.json:
        print(json.dumps({"running": True, "shards": rows, **isr}))
    else:
        for r in rows:
            print(f"{r['shard_id']} {r['url']} pid={r['pid']} {r['status']}")
        print(
            f"epoch {isr['epoch']}: out of sync {', '.join(isr['out_of_sync']) or '-'}; rejoining "
            f"{', '.join(isr['rejoining']) or '-'}; plan authority {isr['supervisor']}"
        )
    healthy = all(r["status"] == "ok" for r in rows) and not plan.out_of_sync and isr["supervisor"] != "down"
    return 0 if healthy else 1


def demo(args: argparse.Namespace) -> int:
    """Load the sample corpus into the running cluster, ask one RAG question and run one AQL query."""
    from .demo.run import render, run_demo

    state = _read_state(args.state_dir)
    if not state and not args.url:
        raise SystemExit("no local cluster is running (make up, or themis up, first)")
    url = args.url or state["shards"][0]["url"]
    verify = ssl.create_default_context(cafile=state["ca"]) if state and state.get("ca") else True
    report = run_demo(
        url,
        api_key=args.api_key,
        verify=verify,
        question=args.question,
        max_tokens=args.max_tokens,
        skip_load=args.skip_load,
    )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="themis", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"themis {__version__}")
    parser.add_argument(
        "--state-dir", type=Path, default=STATE_DIR, help="where cluster.json, plan and logs go"
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help="API key for clusters with keys on (default: $THEMIS_API_KEY, else .themis/auth/admin.key)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help=COMMANDS["up"])
    p_up.add_argument("--shards", type=int, default=3)
    p_up.add_argument("--raid-mode", choices=["raid0", "raid1", "raid5", "raid6"], default=None)
    p_up.add_argument("--host", default="127.0.0.1")
    p_up.add_argument("--base-port", type=int, default=8701)
    p_up.add_argument("--data-root", type=Path, default=Path("data"))
    p_up.add_argument("--timeout", type=float, default=180.0)
    p_up.add_argument("--no-llm", action="store_true", help="documents and vectors only (no model load)")
    p_up.add_argument(
        "--raid-weights",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="stripe the model weights across the shards with parity (default: on for raid5/raid6)",
    )
    p_up.add_argument(
        "--tls",
        action="store_true",
        help="HTTPS for clients and mTLS between shards (certificates in .themis/tls)",
    )
    p_up.add_argument(
        "--auth",
        action="store_true",
        help="require API keys (off by default locally): mints an admin and a client key in .themis/auth",
    )
    p_up.add_argument(
        "--thresholds",
        type=float,
        nargs=3,
        metavar=("T1", "T2", "T3"),
        default=None,
        help="the router's accuracy thresholds θ1 ≥ θ2 ≥ θ3 (default: the paper's 0.8 0.6 0.4)",
    )
    p_up.add_argument(
        "--restore-from",
        default=None,
        metavar="DEST/ID",
        help="start a new cluster from a backup (a directory or s3://bucket/prefix, then its id)",
    )
    p_up.add_argument(
        "--failover",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the local plan authority: a dead shard's keys fail over to their in-sync copies "
        "within seconds (default: on with 2+ shards; off with --tls)",
    )
    p_up.add_argument(
        "--restart-dead",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the plan authority restarts a shard whose process died (default: on)",
    )
    p_up.add_argument(
        "--min-insync",
        type=int,
        default=1,
        help="refuse w=all/majority writes of keys with fewer in-sync copies than this (default 1)",
    )
    p_up.add_argument("--grace", type=float, default=10.0)
    p_up.set_defaults(func=up)
    p_down = sub.add_parser("down", help=COMMANDS["down"])
    p_down.add_argument("--grace", type=float, default=10.0)
    p_down.set_defaults(func=down)
    p_scale = sub.add_parser("scale", help=COMMANDS["scale"])
    p_scale.add_argument("--shards", type=int, required=True)
    p_scale.add_argument("--timeout", type=float, default=600.0)
    p_scale.add_argument("--grace", type=float, default=10.0)
    p_scale.set_defaults(func=scale)
    p_status = sub.add_parser("status", help=COMMANDS["status"])
    p_status.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p_status.set_defaults(func=status)
    p_demo = sub.add_parser("demo", help=COMMANDS["demo"])
    p_demo.add_argument("--question", default="Why is the sky blue?")
    p_demo.add_argument("--max-tokens", type=int, default=48)
    p_demo.add_argument(
        "--url", default=None, help="a shard's URL (default: the local cluster's first shard)"
    )
    p_demo.add_argument("--skip-load", action="store_true", help="the corpus is loaded already")
    p_demo.add_argument("--json", action="store_true", help="print the report as JSON")
    p_demo.set_defaults(func=demo)
    add_raid_commands(sub)  # themis raid status/verify/rebuild/ingest
    add_adapter_commands(sub)  # themis adapters federate
    add_txn_commands(sub)  # themis txn list/resolve
    add_backup_commands(sub)  # themis backup create/list/delete/verify
    return parser


def main(argv: list[str] | None = None, console: Console | None = None) -> int:
    """Exit status: 0 done, 1 the cluster (or a shard) is not healthy or the work failed, 2 usage.
    Progress goes to ``console`` (stderr by default): stdout stays what scripts read."""
    args = build_parser().parse_args(argv)
    args.api_key = resolve_api_key(args.api_key, args.state_dir)
    args.console = console or Console(stderr=True)
    if args.command == "up" and args.raid_mode is None:
        args.raid_mode = "raid1" if args.shards >= 2 else "raid0"
    if args.command == "up" and args.raid_weights is None:
        args.raid_weights = args.raid_mode in ("raid5", "raid6")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
