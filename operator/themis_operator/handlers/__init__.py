"""Thin kopf entry points; importing this package registers every handler."""

from . import adapter, cluster, startup

__all__ = ["adapter", "cluster", "startup"]
