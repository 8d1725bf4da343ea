"""Which extra installs what a shard needs, and the message that names it (no imports of its own).

``pip install themisdb`` is only the cluster contract the operator shares; a shard's engine
(FastAPI, RocksDB, numpy, llama.cpp) comes with ``[shard]`` and FAISS with ``[cpu]`` or ``[gpu]``,
one build each (an extra cannot remove a base dependency, so FAISS is in neither the base nor
``[shard]``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable

#: import name → the extra that installs it ([cpu] and [gpu] both include [shard])
ENGINE_MODULES: dict[str, str] = {
    "fastapi": "[shard]",
    "uvicorn": "[shard]",
    "rocksdict": "[shard]",
    "numpy": "[shard]",
    "httpx": "[shard]",
    "rich": "[shard]",
    "llama_cpp": "[shard]",
    "faiss": "[cpu] or [gpu]",
}
INSTALL_HINT = "pip install 'themisdb[cpu]' (faiss-cpu) or 'themisdb[gpu]' (faiss-gpu and cupy)"


def missing_modules(
    modules: Iterable[str], find_spec: Callable[[str], object | None] = importlib.util.find_spec
) -> list[str]:
    """The modules among ``modules`` that cannot be imported (not installed)."""
    out = []
    for name in modules:
        try:
            found = find_spec(name) is not None
        except (ImportError, ValueError):  # a blocked or broken module counts as missing
            found = False
        if not found:
            out.append(name)
    return out


def missing_extra_message(command: str, missing: list[str]) -> str | None:
    """What to tell the user when ``missing`` is not empty; None when nothing is missing."""
    if not missing:
        return None
    names = ", ".join(f"{m} ({ENGINE_MODULES.get(m, '[shard]')})" for m in missing)
    return f"{command} needs the shard's engine, which comes with an extra: {INSTALL_HINT}. Missing: {names}"
