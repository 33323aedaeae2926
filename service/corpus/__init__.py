"""The document corpus: Redis store, embedding cache, and each replica's derived search index."""
