"""Pod volumes as host directories: PVC directories, emptyDirs, ConfigMap and Secret files.

ConfigMap and Secret volumes are rendered as files (one per key, or per ``items`` entry, with
``defaultMode``/``mode``) and re-rendered whenever the object changes, each file replaced
atomically (write then rename) so a reader sees the old or the new content, never half — the
shards poll the mounted plan's mtime and reload it. Keys that disappear are removed. PVCs are
directories under the node's ``volumes/`` keyed by the claim's uid, so a deleted and recreated
claim starts empty while a restarted pod finds its data.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from pathlib import Path

from .env import ConfigError


def claim_dir(root: Path, namespace: str, name: str, uid: str) -> Path:
    return root / "volumes" / namespace / f"{name}-{uid[:8]}"


def volume_files(
    volume: Mapping, configmaps: Mapping[str, Mapping], secrets: Mapping[str, Mapping]
) -> dict[str, tuple[bytes, int]]:
    """Relative path → (content, mode) of a ConfigMap or Secret volume (pure)."""
    if "configMap" in volume:
        src, objects, kind = volume["configMap"], configmaps, "configmap"
        name = src.get("name", "")
    else:
        src, objects, kind = volume["secret"], secrets, "secret"
        name = src.get("secretName", "")
    obj = objects.get(name)
    if obj is None:
        if src.get("optional"):
            return {}
        raise ConfigError(f'{kind} "{name}" not found (volume {volume["name"]})')
    if kind == "secret":
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    else:
        data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    mode = int(src.get("defaultMode", 0o644))
    if src.get("items"):
        out = {}
        for item in src["items"]:
            if item["key"] not in data:
                if src.get("optional"):
                    continue
                raise ConfigError(f'{kind} "{name}" has no key {item["key"]} (volume {volume["name"]})')
            out[item["path"]] = (data[item["key"]], int(item.get("mode", mode)))
        return out
    return {k: (v, mode) for k, v in data.items()}


def sync_files(directory: Path, files: Mapping[str, tuple[bytes, int]]) -> bool:
    """Make ``directory`` hold exactly ``files``; True when anything changed."""
    directory.mkdir(parents=True, exist_ok=True)
    changed = False
    for rel, (content, mode) in files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file() and path.read_bytes() == content and (path.stat().st_mode & 0o777) == mode:
            continue
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(content)
        os.chmod(tmp, mode)
        tmp.replace(path)
        changed = True
    for path in list(directory.rglob("*")):
        if path.is_file() and str(path.relative_to(directory)) not in files and not path.name.startswith("."):
            path.unlink()
            changed = True
    return changed
