"""Pure builders: typed spec in, Kubernetes manifests (plain dicts) out. No I/O here."""

from .children import build_children
from .context import ClusterContext

__all__ = ["ClusterContext", "build_children"]
