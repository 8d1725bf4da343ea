"""Pure builders: typed spec in, Kubernetes manifests (plain dicts) out. No I/O here."""

from .context import ClusterContext
from .children import build_children

__all__ = ["ClusterContext", "build_children"]
