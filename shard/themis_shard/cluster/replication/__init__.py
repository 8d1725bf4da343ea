"""Keeping copies equal: fenced writes (one coordinator per key per epoch), the primary's lease
from the plan authority, delivery to peers (now, batched, or as a durable hint), Merkle
anti-entropy and tombstone garbage collection.

May import: ``placement``, ``transport``, ``tasks``, ``settings``.
"""
