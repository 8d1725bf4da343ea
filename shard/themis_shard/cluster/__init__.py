"""Cluster membership, routing and shard-to-shard security."""
