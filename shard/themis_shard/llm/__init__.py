"""llama.cpp inference engine of a shard: batching, KV accounting, LoRA, embeddings."""
