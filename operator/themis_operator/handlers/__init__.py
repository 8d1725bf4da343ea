"""Thin kopf entry points; importing this package registers every handler."""

from . import adapter, backup, cluster, startup

__all__ = ["adapter", "backup", "cluster", "startup"]
