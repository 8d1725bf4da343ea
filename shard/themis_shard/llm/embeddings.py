"""Embeddings (placeholder until the bundled embedding model lands)."""

from __future__ import annotations


def load_embedder(settings, metrics):  # noqa: ANN001, ANN201
    return None
