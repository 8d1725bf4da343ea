"""The cluster backup both sides share: the manifest format, the destinations (a folder or an
S3-compatible store), the orchestration over the shards' admin routes (HTTP) and retention.

The shard's own half (the consistent cut, snapshots, restore, the CLI) is ``themis_shard.backup``.
Kept free of imports: boto3 is imported only by an S3 destination.
"""
