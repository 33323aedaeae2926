"""What the API service and the retrain worker share: settings, Redis key names, model
versions, the document store, the embedding cache, the bundle registry and cache paths.

It depends on `models/` only; `service/` and `worker/` depend on it and never on each other.
"""
