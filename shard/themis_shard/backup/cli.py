"""``themis backup create|list|delete|verify --to DEST`` against the local cluster, and the
checks ``themis up --restore-from DEST/ID`` makes before it starts anything.

DEST is a directory or ``s3://bucket/prefix`` (the endpoint and credentials from boto3's
environment: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...). ``create`` prints the new
backup's id on its last line; progress goes to stderr. Exit status 1 when the work failed.
"""

from __future__ import annotations

import argparse
import json
import ssl
from pathlib import Path

import httpx
from themis_core.api_keys import bearer_headers
from themis_core.cluster_backup.destinations import Destination, ObjectMissing, open_destination, split_ref
from themis_core.cluster_backup.manifest import MANIFEST, BackupInvalid, Manifest, parse_manifest
from themis_core.cluster_backup.orchestrate import BackupFailed, BackupProgress, ClusterBackup, ShardTarget
from themis_core.cluster_backup.retention import apply_retention

from ..cli_help import COMMANDS
from ..cli_progress import TransferView
from .restore import data_dir_empty, fetch_backup

#: ``themis up --restore-from`` waits at least this long for ready shards: each restores its
#: part (checks, copies, re-places, rebuilds vectors) before it answers /ready
RESTORE_TIMEOUT_S = 3600.0


def _destination(url: str) -> Destination:
    try:
        return open_destination(url)
    except ValueError as exc:
        raise SystemExit(f"--to: {exc}") from None


def _cluster(args: argparse.Namespace) -> tuple[list[ShardTarget], object]:
    path = Path(args.state_dir) / "cluster.json"
    if not path.exists():
        raise SystemExit("no local cluster is running (themis up first)")
    state = json.loads(path.read_text())
    verify = ssl.create_default_context(cafile=state["ca"]) if state.get("ca") else True
    return [ShardTarget(s["shard_id"], s["url"]) for s in state["shards"]], verify


def create(args: argparse.Namespace) -> int:
    shards, verify = _cluster(args)
    dest = _destination(args.to)
    with (
        httpx.Client(timeout=args.timeout, verify=verify, headers=bearer_headers(args.api_key)) as client,
        TransferView(args.console, "backup: cut") as view,
    ):

        def show(p: BackupProgress) -> None:
            view.update(p.bytes_done, p.bytes_total or None, f"backup: {p.phase}")

        try:
            manifest = ClusterBackup(shards, dest, client, lease_s=args.lease, progress=show).run(args.id)
        except (BackupFailed, ValueError) as exc:
            print(f"backup failed: {exc}")
            return 1
    print(
        f"backup {manifest.backup_id}: {manifest.documents} document copies, {manifest.size / 1e6:.1f} MB "
        f"from {len(manifest.shards)} shard(s) at ring version {manifest.cut.ring_version} → {dest.url}"
    )
    if args.keep:
        for gone in apply_retention(dest, args.keep):
            print(f"retention (keep {args.keep}): deleted {gone}")
    print(manifest.backup_id)
    return 0


def _manifest_or_none(dest: Destination, backup_id: str) -> Manifest | None:
    try:
        return parse_manifest(dest.get_bytes(f"{backup_id}/{MANIFEST}"), backup_id)
    except (ObjectMissing, BackupInvalid):
        return None


def list_backups(args: argparse.Namespace) -> int:
    dest = _destination(args.to)
    rows = []
    for backup_id in dest.backups():
        m = _manifest_or_none(dest, backup_id)
        rows.append(
            {"id": backup_id, "complete": m is not None}
            | (
                {
                    "created_at": m.created_at,
                    "cluster": m.cluster,
                    "shards": len(m.shards),
                    "ring_version": m.cut.ring_version,
                    "bytes": m.size,
                    "documents": m.documents,
                    "format_version": m.format_version,
                }
                if m
                else {}
            )
        )
    if args.json:
        print(json.dumps(rows))
        return 0
    for r in rows:
        if r["complete"]:
            print(
                f"{r['id']} {r['created_at']} {r['cluster']} shards={r['shards']} "
                f"ring={r['ring_version']} {r['bytes'] / 1e6:.1f}MB docs={r['documents']}"
            )
        else:
            print(f"{r['id']} INCOMPLETE (no manifest)")
    return 0


def delete(args: argparse.Namespace) -> int:
    dest = _destination(args.to)
    if args.id not in dest.backups():
        print(f"{dest.url} holds no backup {args.id}")
        return 1
    print(f"deleted {args.id} ({dest.delete(args.id)} objects)")
    return 0


def verify(args: argparse.Namespace) -> int:
    dest = _destination(args.to)
    try:
        with TransferView(args.console, f"verify {args.id}") as view:
            m = fetch_backup(dest, args.id, None, progress=lambda d, t: view.update(d, t))
    except BackupInvalid as exc:
        print(f"invalid: {exc}")
        return 1
    print(
        f"{args.id} ok: {sum(len(s.files) for s in m.shards)} files, {m.size / 1e6:.1f} MB, checksums match"
    )
    return 0


def prepare_restore(ref: str, data_root: Path, console, running: bool) -> str:
    """Before ``themis up --restore-from`` starts anything: the data root is empty, no cluster
    runs, and the backup is whole (manifest, every file's sha256). The reference the shards get
    (a directory made absolute)."""
    if running:
        raise SystemExit("a local cluster is running: themis down first (a restore starts a new cluster)")
    root = Path(data_root)
    if root.exists():
        busy = sorted(p.name for p in root.iterdir() if p.is_dir() and not data_dir_empty(p))
        if busy:
            raise SystemExit(
                f"--data-root {root} is not empty ({', '.join(busy)} hold data): a restore goes into an "
                "empty data root (themis down, then move it away or pick another --data-root)"
            )
    try:
        dest_url, backup_id = split_ref(ref)
        dest = open_destination(dest_url)
    except ValueError as exc:
        raise SystemExit(f"--restore-from: {exc}") from None
    try:
        with TransferView(console, f"verify {backup_id}") as view:
            fetch_backup(dest, backup_id, None, progress=lambda d, t: view.update(d, t))
    except BackupInvalid as exc:
        raise SystemExit(f"--restore-from: {exc}; nothing was started") from None
    return (
        f"{dest.url}/{backup_id}"
        if dest_url.startswith("s3://")
        else f"{Path(dest.url).resolve()}/{backup_id}"
    )


def add_backup_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("backup", help=COMMANDS["backup"])
    bsub = p.add_subparsers(dest="backup_command", required=True)

    def dest_arg(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--to", required=True, help="a directory or s3://bucket/prefix (AWS_ENDPOINT_URL …)"
        )

    c = bsub.add_parser("create", help="take a consistent backup of the running cluster; prints its id last")
    dest_arg(c)
    c.add_argument("--id", default=None, help="the backup's id (default: themis-<UTC time>-<random>)")
    c.add_argument("--keep", type=int, default=0, help="then delete all but the newest KEEP complete backups")
    c.add_argument("--lease", type=float, default=60.0, help="seconds a shard's gate stays closed if we die")
    c.add_argument("--timeout", type=float, default=300.0)
    c.set_defaults(func=create)
    ls = bsub.add_parser("list", help="the backups at DEST (incomplete ones marked)")
    dest_arg(ls)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=list_backups)
    d = bsub.add_parser("delete", help="delete one backup")
    dest_arg(d)
    d.add_argument("id")
    d.set_defaults(func=delete)
    v = bsub.add_parser("verify", help="check a backup's manifest and every file's sha256")
    dest_arg(v)
    v.add_argument("id")
    v.set_defaults(func=verify)
