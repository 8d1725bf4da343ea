"""``LoadedModel``: one model the runtime serves, with everything built around its engine."""

from __future__ import annotations

from dataclasses import dataclass

from .engine import Engine
from .lora import AdapterManager
from .model import ModelFingerprint
from .native import NativeModel
from .prefix_hook import EnginePrefixHook
from .speculative.speculator import Speculator


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """One model the runtime serves: its weights, its engine, and what hangs off that engine.
    Built whole once the engine runs; nothing is attached later."""

    alias: str
    native: NativeModel
    engine: Engine
    fingerprint: ModelFingerprint
    adapters: AdapterManager
    prefix: EnginePrefixHook | None = None  # the KV-prefix cache (``prefix_cache`` setting)
    speculator: Speculator | None = None  # speculative decoding (``speculative_source``)
    created: int = 0  # unix time the model came up (the OpenAI model list shows it)
