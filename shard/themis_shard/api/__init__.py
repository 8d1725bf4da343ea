"""REST routers of the shard (one module per resource)."""
