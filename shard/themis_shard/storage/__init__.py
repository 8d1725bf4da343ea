"""Durable document storage of a shard (RocksDB via rocksdict)."""
