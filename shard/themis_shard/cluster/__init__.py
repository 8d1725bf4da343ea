"""The cluster side of a shard, one package per distributed concern.

Layers, top to bottom (``make lint`` enforces them with import-linter; nothing imports upward):

* ``service`` — the façade that builds every cluster part once;
* ``plan_watcher`` (adopts the plan file) and ``membership/`` (gossip, member states, what a
  shard announces, the draft shard);
* ``routing/`` (where inference runs: domain and prefix routing, scatter-gather, resumable
  streams) and ``transactions/`` (two-phase commit and its termination);
* ``documents/`` — routed reads and writes, and collections across shards;
* ``replication/`` — fencing, the primary's lease, delivery with hints and batching,
  anti-entropy, tombstone GC;
* ``placement/`` — ownership from the plan, the live plan views, resharding hand-off;
* ``transport/`` (shard-to-shard HTTP that fails fast, with breakers) and ``security/``
  (signed internal requests, certificate reload);
* ``settings`` and ``tasks`` — typed settings and background-task groups, used by all.
"""
