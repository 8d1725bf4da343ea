"""Shard-to-shard trust: signed ``/internal`` requests without TLS, and certificate rotation
into live TLS contexts. May import: nothing else of the cluster.
"""
