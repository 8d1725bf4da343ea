"""Retrieval-augmented generation: retrieve passages by vector search, build the prompt that
holds them, and pick where to generate. ``prompt`` (pure) is shared with AQL's ``RAG``;
``retrieval`` is the scatter-gathered vector search ``/v1/collections/{c}/search`` uses too;
``placement`` (pure) picks the shard that holds the data; ``service`` runs a ``/v1/rag`` request."""
