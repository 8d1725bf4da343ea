"""Where an inference request runs: the adaptive domain router, prefix-aware routing, the
cluster prefix directory, scatter-gather batches and streams that resume on another shard.

Decisions are pure functions; transport goes through ``transport.remote``. May import:
``documents`` (relaying a peer's answer), ``placement``, ``transport``, ``settings``.
"""
