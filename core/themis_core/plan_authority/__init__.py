"""The plan authority: the one writer of the in-sync set (failover).

``in_sync`` decides (pure); ``authority`` probes the members, grants their leases and writes
the plan through a ``PlanStore`` — a file for ``themis up``'s supervisor, the plan ConfigMap for
the operator.
"""
