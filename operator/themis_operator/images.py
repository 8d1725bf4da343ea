"""Which shard image a ThemisCluster runs when its spec does not pin one.

The CRD stores no default image: a default stored in every object at creation would pin each
cluster to the version that was current then, and upgrading the operator would never roll the
shards. Instead the operator fills it in at reconcile time from its own version, so a new
operator rolls unpinned clusters to the matching shards (one pod at a time).
"""

from __future__ import annotations

from pathlib import Path

from themis_core.version import distribution_version

SHARD_REPOSITORY = "ghcr.io/themisdb/themis-shard"


def operator_version() -> str:
    """themisdb-operator's version: the repository's one VERSION (operator/VERSION links to it)."""
    return distribution_version("themisdb-operator", Path(__file__).resolve().parents[1] / "VERSION")


def default_shard_image(repository: str = SHARD_REPOSITORY, version: str | None = None) -> str:
    """``<repository>:<operator version>``: the shards this operator was released with."""
    return f"{repository}:{version or operator_version()}"
