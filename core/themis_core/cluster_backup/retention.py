"""Which backups a retention policy deletes: all but the newest ``keep`` complete ones.

Incomplete backups (no manifest) are never deleted here: one may be a backup still being
written; ``themis backup delete`` removes them by id.
"""

from __future__ import annotations

from collections.abc import Iterable

from .destinations import Destination, ObjectMissing
from .manifest import MANIFEST, BackupInvalid, parse_manifest


def expired(complete: Iterable[tuple[str, str]], keep: int) -> list[str]:
    """Pure: of (backup id, created_at ISO) pairs, the ids beyond the newest ``keep``."""
    if keep < 1:
        raise ValueError("a retention policy keeps at least one backup")
    newest_first = sorted(complete, key=lambda b: (b[1], b[0]), reverse=True)
    return sorted(b[0] for b in newest_first[keep:])


def apply_retention(dest: Destination, keep: int) -> list[str]:
    """Delete the backups ``expired`` names at ``dest``; their ids."""
    complete = []
    for backup_id in dest.backups():
        try:
            complete.append(
                (backup_id, parse_manifest(dest.get_bytes(f"{backup_id}/{MANIFEST}"), backup_id).created_at)
            )
        except (ObjectMissing, BackupInvalid):
            continue
    gone = expired(complete, keep)
    for backup_id in gone:
        dest.delete(backup_id)
    return gone
