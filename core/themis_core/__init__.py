"""Themis core: the cluster contract the shards and the operator share (plan, ring, status model,
certificates, API keys, logs, the cluster backup's manifest and orchestration).

Light on purpose: pydantic, cryptography and httpx, never an engine (llama.cpp, FAISS, RocksDB,
FastAPI), so ``themisdb-operator`` depends on it alone; it imports neither ``themis_shard`` nor
``themis_operator`` (import-linter contracts in the root ``pyproject.toml``).
"""

from .version import distribution_version

__version__ = distribution_version("themisdb-core")
