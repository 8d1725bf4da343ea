"""Themis shard: a converged document store, vector index and LLM inference node."""

__version__ = "0.1.0"
