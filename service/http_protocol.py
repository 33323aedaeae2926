"""uvicorn's httptools protocol, hardened (service/server.py configures the server with it).

uvicorn's httptools protocol reads a request head of any size (llhttp buffers a header value of
any length), arms no timer on a new connection (its keep-alive timeout starts only after a
response), none while a request's head or body trickles in, and answers unparsable requests
with plain text. `HardenedHttpProtocol` adds, per connection:

- a byte limit on the request line plus headers, counted on the bytes as they arrive, and a
  limit on the number of header fields: 431 (414 when the request line alone is over);
- an idle timeout for a connection with no request in progress, new or between requests: closed
  without an answer, as after any keep-alive timeout;
- a header timeout, from the first byte of a request to its last header, and a body timeout,
  from the last header to the body's last byte: 408, and the connection is closed;
- the error body of service/errors.py, with an X-Request-Id, on every answer it writes itself,
  malformed HTTP included; the reason goes to the log under that id.

What it cannot answer in JSON: a refusal while an earlier response on the same connection is
still being written (pipelining) ends the connection after that response instead, and a body
timeout after the app has started its response just closes the connection.
"""

import asyncio
import logging
from asyncio import TimerHandle
from typing import Any

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from core.settings import get_settings
from service.errors import (
    ApiError,
    BadRequestError,
    HeadersTooLargeError,
    RequestTimeoutError,
    UriTooLongError,
    error_body,
)
from service.limits import ServerLimits
from service.request_id import REQUEST_ID_HEADER, new_request_id

logger = logging.getLogger(__name__)

# After refusing a request whose bytes may still be arriving, keep reading (and dropping) them
# this long before closing: closing a socket with unread input sends a reset, which can destroy
# the refusal before the client reads it.
_LINGER_S = 2.0
_HEAD_END = b"\r\n\r\n"  # llhttp rejects bare LF line ends, so this is the only terminator
# The uvicorn.Config attribute that carries the limits to the protocol, as plain values.
LIMITS_ATTRIBUTE = "rankserve_server_limits"


class _TooManyHeadersError(Exception):
    """Raised from the headers-complete callback to stop parsing; httptools wraps it."""


class HardenedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of `ServerLimits` (see the module doc).

    Phases of a connection: waiting for a request (idle timer), reading its head (header timer
    from the first byte, byte count), reading its body (body timer), then waiting again once
    the body is complete; the app's own time is never counted against the client.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        limits = getattr(config, LIMITS_ATTRIBUTE, None)
        # Run by plain uvicorn (`--http service.http_protocol:HardenedHttpProtocol`): the
        # environment's settings.
        self.limits = (
            ServerLimits(**limits) if limits else ServerLimits.from_settings(get_settings())
        )
        # uvicorn arms this after each response; connection_made arms it for a new connection.
        self.timeout_keep_alive = self.limits.keep_alive_timeout_s  # type: ignore[assignment]
        self._in_head = True  # from the end of a body (or the start) to the end of headers
        self._head_bytes = 0
        self._request_line_done = False
        self._tail = b""  # the stream's last bytes, for a head end split across reads
        self._head_timer: TimerHandle | None = None
        self._body_timer: TimerHandle | None = None
        self._too_many_headers = False
        self._refused = False

    # Connection events

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # uvicorn waits for the first request without a deadline: an idle connection would
        # stay open for good.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_phase_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # lingering after a refusal: drop what is still arriving
        self._unset_keepalive_if_required()
        if self._in_head and not self._count_head(data):
            return
        keep = len(_HEAD_END) - 1
        self._tail = data[-keep:] if len(data) >= keep else (self._tail + data)[-keep:]
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError as error:
            if self._too_many_headers:
                self._refuse(
                    HeadersTooLargeError,
                    f"the request has more than {self.limits.max_headers} header fields",
                    "too many header fields",
                    linger=True,
                )
            else:
                self._refuse_malformed(error)
            return
        self._arm_phase_timer()

    def handle_websocket_upgrade(self) -> None:
        # The connection passes to another protocol: this one's timers must not close it.
        self._cancel_phase_timers()
        super().handle_websocket_upgrade()

    # Parser callbacks

    def on_headers_complete(self) -> None:
        # Counted here, not per header: the byte limit already bounds what llhttp buffered.
        if len(self.headers) > self.limits.max_headers:
            self._too_many_headers = True
            raise _TooManyHeadersError  # before the app sees the request
        # Then: when it raises (a URL it cannot parse), the request is still in its head.
        super().on_headers_complete()
        self._in_head = False
        self._head_bytes = 0
        self._request_line_done = False
        self._cancel(self._head_timer)
        self._head_timer = None

    def on_message_complete(self) -> None:
        self._in_head = True
        self._cancel(self._body_timer)
        self._body_timer = None
        super().on_message_complete()

    def _arm_phase_timer(self) -> None:
        """After a read, the timer of the phase the connection is now in, unless it runs.

        Armed after the read rather than on each callback, so that a request that arrives
        whole in one read (most do) arms nothing.
        """
        if self.transport.is_closing():
            return
        if not self._in_head:
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(
                    self.limits.body_timeout_s, self._body_timed_out
                )
        elif self._head_timer is None and self._head_bytes:
            # Part of a head is in (line ends before a request included: a client trickling
            # those must not hold the connection either): the header clock runs.
            self._head_timer = self.loop.call_later(
                self.limits.header_timeout_s, self._head_timed_out
            )

    # Limits

    def _count_head(self, data: bytes) -> bool:
        """Adds this read's head bytes to the count; False when that refused the request.

        Counted before llhttp sees them: it would buffer a header of any length first.
        """
        # First an end that straddles this read and the last one (it starts in the tail).
        end = (self._tail + data[: len(_HEAD_END) - 1]).find(_HEAD_END)
        if end >= 0:
            head = data[: end + len(_HEAD_END) - len(self._tail)]
        else:
            end = data.find(_HEAD_END)
            head = data if end < 0 else data[: end + len(_HEAD_END)]
        self._head_bytes += len(head)
        if self._head_bytes <= self.limits.max_header_bytes:
            self._request_line_done = self._request_line_done or b"\n" in head
            return True
        limit = self.limits.max_header_bytes
        if self._request_line_done or b"\n" in head[: limit - (self._head_bytes - len(head))]:
            self._refuse(
                HeadersTooLargeError,
                f"the request line and headers are larger than the limit of {limit} bytes",
                f"request head over {limit} bytes",
                linger=True,
            )
        else:
            self._refuse(
                UriTooLongError,
                f"the request line is larger than the limit of {limit} bytes",
                f"request line over {limit} bytes",
                linger=True,
            )
        return False

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            seconds = self.limits.header_timeout_s
            self._refuse(
                RequestTimeoutError,
                f"the request headers did not arrive within {seconds:g} s",
                f"head incomplete after {seconds:g} s ({self._head_bytes} bytes)",
                linger=False,
            )

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if self._in_head or self.transport.is_closing():
            return
        if self.flow.read_paused:
            # Reading is paused because the app has not taken the body yet: not the client's
            # doing, so its clock waits too.
            self._body_timer = self.loop.call_later(
                self.limits.body_timeout_s, self._body_timed_out
            )
            return
        seconds = self.limits.body_timeout_s
        self._refuse(
            RequestTimeoutError,
            f"the request body did not arrive within {seconds:g} s",
            f"body incomplete after {seconds:g} s",
            linger=False,
        )

    def _refuse_malformed(self, error: httptools.HttpParserError) -> None:
        if isinstance(error, httptools.HttpParserInvalidMethodError):
            message = "the request method is not a known HTTP method"
        else:
            message = "the request is not valid HTTP/1.1"
        # llhttp's reason ("Transfer-Encoding can't be present with Content-Length") is for
        # the log; the cause of a callback error is what the callback raised.
        cause = error.__context__ if isinstance(error, httptools.HttpParserCallbackError) else None
        detail = f"malformed request: {error}" + (f" ({cause!r})" if cause else "")
        self._refuse(BadRequestError, message, detail, linger=True)

    def _refuse(self, error: type[ApiError], message: str, detail: str, *, linger: bool) -> None:
        """Answers `error` with the JSON body when the next response on the wire is ours to
        write, then ends the connection; logs `detail` under the answer's request id."""
        if self._refused:
            return
        self._refused = True
        self._cancel_phase_timers()
        request_id = new_request_id()
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "unknown client"
        logger.info(
            "refused a request from %s with %d: %s",
            client,
            error.status_code,
            detail,
            extra={"request_id": request_id},
        )
        cycle = self.cycle
        if self._in_head:
            if cycle is not None and not cycle.response_complete:
                # An earlier request's response is still to come: ours cannot go first.
                self._end_after_response_in_flight()
                return
        elif cycle.response_started:
            # The app has answered (or is answering) this request already: just end it.
            self.transport.close()
            return
        elif self.pipeline:
            self._end_after_response_in_flight()  # queued behind an earlier response
            return
        else:
            # The app is waiting for this body: it sees a disconnect, and its answer (to a
            # request that is gone) is dropped instead of following ours on the wire.
            cycle.disconnected = True
        body = error_body(error, message)
        head = [STATUS_LINE[error.status_code]]
        for name, value in self.server_state.default_headers:
            head.extend([name, b": ", value, b"\r\n"])
        head.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: %d\r\n" % len(body),
                b"connection: close\r\n",
                REQUEST_ID_HEADER.lower().encode() + b": " + request_id.encode() + b"\r\n",
                b"\r\n",
            ]
        )
        self.transport.write(b"".join(head) + body)
        if linger and self.transport.can_write_eof():
            # Half-close: the client reads the answer and EOF; its remaining bytes are read
            # and dropped until it closes (eof_received) or the linger time is over.
            self.transport.write_eof()
            self.loop.call_later(_LINGER_S, self.transport.close)
        else:
            self.transport.close()

    def _end_after_response_in_flight(self) -> None:
        """An earlier response is still being produced: close once it is out, read no more."""
        self.pipeline.clear()
        if self.cycle is not None:
            self.cycle.keep_alive = False
        self.flow.pause_reading()

    # Timers

    @staticmethod
    def _cancel(timer: TimerHandle | None) -> None:
        if timer is not None:
            timer.cancel()

    def _cancel_phase_timers(self) -> None:
        self._cancel(self._head_timer)
        self._cancel(self._body_timer)
        self._head_timer = self._body_timer = None
