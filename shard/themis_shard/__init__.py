"""Themis shard: a converged document store, vector index and LLM inference node."""

from themis_core.version import distribution_version

__version__ = distribution_version("themisdb")
