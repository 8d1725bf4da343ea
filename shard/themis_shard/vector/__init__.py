"""FAISS vector indexes per collection (GPU when present), consistent with the store."""
