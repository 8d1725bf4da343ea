"""Themis shard: a converged document store, vector index and LLM inference node."""

from importlib.metadata import PackageNotFoundError, version

try:  # the version lives in pyproject.toml only; an uninstalled source tree says so
    __version__ = version("themis")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0+unknown"
