"""LoRA adapters: load/unload GGUF LoRA files at runtime, route by name or domain.

llama.cpp applies adapters per context, not per sequence, so the engine serves one adapter group
per iteration (see ``scheduler``). Adapter pointers are created, applied and freed only on the
engine thread (``Engine.attach_adapter``/``detach_adapter``), so an unload can never race a decode
that uses it.
Each loaded adapter is evaluated once (``evaluation``) for the gossip capability announcement.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import BadRequest, Conflict, NotFound
from .compute_threads import run_once
from .engine import Engine
from .lora_eval import evaluate_adapter
from .metrics import LLMMetrics
from .model import ModelError, read_gguf_metadata, sha256_file
from .native import NativeModel
from .settings import LLMSettings

log = logging.getLogger(__name__)

#: The held-out set an adapter is evaluated on: (domain, the adapter file's metadata) → pairs
#: and the set's name, or None for the shard's generic set.
ValidationSets = Callable[[str | None, dict], tuple[Sequence[tuple[str, str]], str] | None]

_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_.")


@dataclass
class AdapterInfo:
    name: str
    path: str
    domain: str | None
    scale: float
    sha256: str
    alpha: float | None
    rank: int | None
    loaded_at: float
    evaluation: dict | None = None
    evaluating: bool = False
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("extra")
        return d


def validate_adapter_file(path: Path, architecture: str) -> dict:
    """Check a GGUF LoRA before llama.cpp sees it (llama.cpp aborts less politely)."""
    if not path.is_file():
        raise BadRequest(f"adapter file not found: {path}", code="adapter_file_not_found")
    try:
        meta = read_gguf_metadata(path)
    except ModelError as exc:
        raise BadRequest(str(exc), code="invalid_adapter") from exc
    if meta.get("general.type") != "adapter" or meta.get("adapter.type") != "lora":
        raise BadRequest("not a GGUF LoRA adapter (general.type/adapter.type)", code="invalid_adapter")
    if meta.get("general.architecture") != architecture:
        raise BadRequest(
            f"adapter is for {meta.get('general.architecture')!r}, model is {architecture!r}",
            code="invalid_adapter",
        )
    return meta


class AdapterManager:
    """The adapters resident on one model (``architecture``: what an adapter file must be for)."""

    def __init__(
        self,
        engine: Engine,
        native: NativeModel,
        architecture: str,
        settings: LLMSettings,
        metrics: LLMMetrics | None = None,
        validation_sets: ValidationSets | None = None,
    ) -> None:
        self.engine = engine
        self._validation_sets = validation_sets
        self.native = native
        self.architecture = architecture
        self.settings = settings
        self.metrics = metrics
        self._infos: dict[str, AdapterInfo] = {}
        self._ptrs: dict[str, object] = {}
        self._lock = asyncio.Lock()
        self._tasks: dict[str, asyncio.Task] = {}

    def list(self) -> list[AdapterInfo]:
        return list(self._infos.values())

    def get(self, name: str) -> AdapterInfo:
        info = self._infos.get(name)
        if info is None:
            raise NotFound(f"unknown adapter {name!r}", code="adapter_not_found")
        return info

    def resolve(self, adapter: str | None, domain: str | None) -> str | None:
        """Explicit adapter name wins; else the adapter serving ``domain``; else the base model."""
        if adapter:
            return self.get(adapter).name
        if domain:
            for info in self._infos.values():
                if info.domain == domain:
                    return info.name
        return None

    async def load(
        self, name: str, path: str, *, domain: str | None, scale: float = 1.0, evaluate: bool | None = None
    ) -> AdapterInfo:
        if not name or len(name) > 64 or not set(name) <= _NAME_CHARS:
            raise BadRequest("adapter name must be 1-64 chars of [a-z0-9-_.]", code="invalid_adapter_name")
        if not (-4.0 <= scale <= 4.0):
            raise BadRequest("scale must be within [-4, 4]", code="invalid_adapter")
        async with self._lock:
            if name in self._infos:
                raise Conflict(f"adapter {name!r} is already loaded", code="adapter_exists")
            if len(self._infos) >= self.settings.max_adapters:
                raise Conflict(
                    f"at most {self.settings.max_adapters} adapters resident", code="too_many_adapters"
                )
            file = Path(path).expanduser()
            meta = await asyncio.to_thread(validate_adapter_file, file, self.architecture)
            digest = await asyncio.to_thread(sha256_file, file)
            ptr = await asyncio.wrap_future(self.engine.attach_adapter(name, str(file), scale))
            if ptr is None:
                raise BadRequest(
                    "llama.cpp rejected the adapter (tensor shapes or names do not match the model)",
                    code="invalid_adapter",
                )
            alpha = meta.get("adapter.lora.alpha")
            info = AdapterInfo(
                name=name,
                path=str(file),
                domain=domain,
                scale=scale,
                sha256=digest,
                alpha=float(alpha) if alpha is not None else None,
                rank=None,
                loaded_at=time.time(),
                extra={"meta": meta},
            )
            self._infos[name] = info
            self._ptrs[name] = ptr
            self._gauge()
        if evaluate if evaluate is not None else self.settings.adapter_eval_on_load:
            self._spawn_evaluation(info)
        return info

    async def unload(self, name: str) -> None:
        async with self._lock:
            self.get(name)
            task = self._tasks.get(name)
            if task is not None:  # its worker thread holds the adapter pointer: let it finish
                await asyncio.wait([task])
            await asyncio.wrap_future(self.engine.detach_adapter(name))
            self._infos.pop(name)
            self._ptrs.pop(name)
            self._gauge()

    async def evaluated(self, name: str) -> dict | None:
        """The adapter's evaluation once the hook has finished (None: not evaluated, or it failed):
        a federated round reports what each participant measured on its held-out set."""
        task = self._tasks.get(name)
        if task is not None:
            await asyncio.wait([task])
        return self.get(name).evaluation

    def pointer(self, name: str) -> object:
        return self._ptrs[name]

    def close(self) -> None:
        for t in self._tasks.values():
            t.cancel()
        # Adapters are freed with the model (llama.cpp owns them through it).
        self._infos.clear()
        self._ptrs.clear()
        self._gauge()

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.active_adapters.set(len(self._infos))

    def _spawn_evaluation(self, info: AdapterInfo) -> None:
        async def run() -> None:
            info.evaluating = True
            try:
                chosen = (
                    self._validation_sets(info.domain, info.extra.get("meta", {}))
                    if self._validation_sets
                    else None
                )
                pairs, set_name = chosen if chosen else (None, "")
                info.evaluation = await run_once(
                    functools.partial(
                        evaluate_adapter,
                        self.native,
                        self._ptrs[info.name],
                        info.scale,
                        self.settings,
                        pairs=pairs,
                        set_name=set_name,
                    ),
                    "llm-adapter-eval",
                )
            except Exception:
                log.exception("evaluating adapter %s failed", info.name)
            finally:
                info.evaluating = False

        task = asyncio.get_running_loop().create_task(run())
        self._tasks[info.name] = task
        task.add_done_callback(lambda _: self._tasks.pop(info.name, None))
