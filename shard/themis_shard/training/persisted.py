"""Trained and federated adapters outlive the process.

Training writes ``<weights>/trained/<name>.gguf`` (the weights volume in Kubernetes); this keeps,
next to the files, which of them are loaded (``loaded.json``: name → domain, replaced atomically),
so that a restarted shard loads them again before it announces its adapters through gossip. An
adapter unloaded through the API is forgotten (its file stays: a later federate call may
continue from it). Adapters placed by the cluster plan are not recorded: the plan reloads them.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Protocol

from themis_core.data_format import check

log = logging.getLogger(__name__)

MANIFEST = "loaded.json"
#: The manifest's format version; a newer one is refused (a downgraded shard must not guess).
FORMAT = 1


class Adapters(Protocol):
    async def load(self, name: str, path: str, *, domain: str | None, evaluate: bool | None = None): ...


class TrainedAdapters:
    """The loaded trained adapters of one shard, recorded in ``out_dir``."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir

    @property
    def manifest(self) -> Path:
        return self.out_dir / MANIFEST

    def entries(self) -> dict[str, str | None]:
        """name → domain of the adapters to load at start-up."""
        try:
            raw = json.loads(self.manifest.read_text())
        except FileNotFoundError:
            return {}
        check(str(self.manifest), int(raw.get("format", FORMAT)), FORMAT)
        return {str(k): v for k, v in (raw.get("adapters") or {}).items()}

    def record(self, name: str, domain: str | None) -> None:
        self._write({**self.entries(), name: domain})

    def forget(self, name: str) -> None:
        entries = self.entries()
        if entries.pop(name, ...) is not ...:
            self._write(entries)

    def _write(self, entries: dict[str, str | None]) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.manifest.with_suffix(".tmp")
        with tmp.open("w") as f:
            json.dump({"format": FORMAT, "adapters": dict(sorted(entries.items()))}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.manifest)

    async def reload(self, adapters: Adapters) -> list[str]:
        """Load every recorded adapter whose file is there; one that fails is logged and skipped
        (a shard must start without it rather than not at all)."""
        loaded = []
        for name, domain in self.entries().items():
            path = self.out_dir / f"{name}.gguf"
            if not path.is_file():
                log.warning("trained adapter %s: %s is gone, not reloaded", name, path)
                continue
            try:
                await adapters.load(name, str(path), domain=domain, evaluate=True)
            except Exception as exc:
                log.warning("trained adapter %s did not reload: %s", name, exc)
                continue
            loaded.append(name)
        if loaded:
            log.info("reloaded trained adapters: %s", ", ".join(loaded))
        return loaded
