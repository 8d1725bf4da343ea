"""Shard-to-shard calls: one pooled HTTP client that fails fast and typed behind per-peer
circuit breakers. May import: ``settings`` only.
"""
