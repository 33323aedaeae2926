"""Training objectives, one per module, each a pure function of embeddings plus a loss class.

The classes follow the sentence-transformers convention: `forward` encodes the batch with the
model in training mode (dropout on) and calls the module's pure function, so the maths is
testable without a model.
"""
