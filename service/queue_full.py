"""The batcher's refusal when its queue is full: a plain exception (the batcher knows nothing
of HTTP, service/errors.py maps it to 429), in a module of its own so that what maps it does
not import the encoder with the batcher."""


class QueueFullError(RuntimeError):
    """More texts are waiting than the queue holds; retry after `retry_after_s`."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__("the encoder queue is full")
        self.retry_after_s = retry_after_s
