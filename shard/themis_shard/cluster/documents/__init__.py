"""Documents and collections across the cluster: any shard accepts any request and routes it
to the key's primary, which coordinates the write under ``replication``'s fencing.

May import: ``replication``, ``placement``, ``transport``, ``tasks``, ``settings``.
"""
