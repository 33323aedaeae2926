"""The rankserve HTTP service."""
