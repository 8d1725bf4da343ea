"""Who is in the cluster and what each member says of itself.

Gossip (state, wire format, loop), member states, the load and adapter capabilities a shard
announces, and which peer drafts for it. May import: ``routing.router`` (the capability type a
member announces), ``placement``, ``transport``, ``tasks``, ``settings``.
"""
