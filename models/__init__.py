"""The ML core of rankserve: tensors in, tensors out. Imports neither FastAPI nor Redis."""
