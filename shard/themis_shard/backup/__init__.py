"""Cluster backups and restores, the shard's half (see ``cut.py`` for why a backup is one
consistent cut): the gates and snapshots a shard serves, restore, and the ``themis backup`` CLI.

The half the operator shares (manifest, destinations, orchestration, retention) is
``themis_core.cluster_backup``.
"""
