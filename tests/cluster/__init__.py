"""Tests of the cluster layer (breaker, remote executor, gossip, router)."""
