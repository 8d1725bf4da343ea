"""Shard-to-shard trust: signed ``/internal`` requests without TLS, and certificate rotation
into live TLS contexts. Imports nothing else of the cluster.
"""
