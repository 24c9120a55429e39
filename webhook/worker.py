"""The webhook's gunicorn worker: gthread, with the waiting on clients moved out of the thread pool.

gunicorn's gthread worker (27.x) does each new connection's TLS handshake in a pool thread, blocking
with no timeout, and reads each request there too. Forty clients that send a partial ClientHello
(or trickle their headers) then hold all 16 threads of the shipped settings: admission requests
queue behind them until the apiserver gives up, and the pods are admitted ungated.

Here the worker's poller, which already waits on kept-alive connections for free, also drives the
TLS handshake (non-blocking) and reads each request until it is complete; only then does a pool
thread get it, parse it from memory and answer. A client gets ``server.handshakeTimeoutSeconds`` to
finish its handshake and ``server.readTimeoutSeconds`` to send a whole request (from the moment the
connection is ready for one, or its first byte arrives on a kept-alive connection); then it is
closed, quietly: a debug log line and ``kubenexus_webhook_client_timeouts_total``. A request the
poller does not read ahead in full (``Expect: 100-continue``, a chunked body, a body over
``READ_AHEAD_BYTES``) is read by its thread within what is left of the same deadline, and every
thread's socket has that timeout for writing the answer too.

An admission request (``POST /mutate``, ``POST /validate``) is first answered on the poller itself, with the
owner cache in :func:`~kube.owner_cache.cached_only` mode: with its owners cached it needs no I/O, and skipping the
hand-over to a pool thread and back (two thread switches, a pipe, the GIL changing hands) is most of what the
stack costs per request. A request that needs a read (:class:`~kube.owner_cache.NeedsRead`, raised before any
metric or log line) goes to a pool thread as usual, parsed again there from the same bytes. The answer is
written without blocking; what the client does not take at once is written by a pool thread, under the write
timeout, so a client that does not read cannot hold the poller either.

This relies on gthread internals (``TConn``, ``enqueue_req``, ``murder_pending``, the parser's
``unreader``): pyproject.toml pins gunicorn to the 27.x series it was written and tested against.
HTTP/1.1 only: the webhook's TLS context offers no ALPN, so HTTP/2 is never negotiated.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import selectors
import ssl
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

from gunicorn import glogging, http
from gunicorn import sock as gunicorn_sock
from gunicorn.http.errors import NoMoreData
from gunicorn.http.unreader import SocketUnreader
from gunicorn.workers.gthread import TConn, ThreadWorker

from kube.owner_cache import NeedsRead, cached_only

log = logging.getLogger("kubenexus.webhook")

READ_AHEAD_BYTES = 256 * 1024  # requests up to this size are read whole by the poller
MAX_HEAD_BYTES = 64 * 1024  # a head this long without its end goes to gunicorn's parser, which refuses it
# A worker accepts at most one connection per this many seconds while others wait in the backlog (a burst, such as
# a client opening its pool): the other workers, if idle, take them. Connections are spread over the workers, and so
# is the load, as each answers its connections' requests on its own poller. Past it, the worker takes the next one.
ACCEPT_SPACING = 0.005
_LENGTH = re.compile(rb"\r\ncontent-length[ \t]*:[ \t]*([0-9]{1,12})[ \t]*\r\n", re.IGNORECASE)
_TO_THE_THREAD = re.compile(rb"\r\n(?:expect[ \t]*:|transfer-encoding[ \t]*:)", re.IGNORECASE)
_ADMISSION = re.compile(rb"POST /(?:mutate|validate)[ ?]")  # what the poller tries to answer itself


def _request_read(data: bytes | bytearray) -> tuple[bool, bool]:
    """(complete, whole): see :func:`request_complete`; whole when ``data`` holds all of the request."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return len(data) >= MAX_HEAD_BYTES, False
    head = data[:end + 2]
    if _TO_THE_THREAD.search(head):
        return True, False
    length = _LENGTH.search(head)
    body = int(length.group(1)) if length else 0
    read = len(data) - end - 4
    return read >= min(body, READ_AHEAD_BYTES), read >= body


def request_complete(data: bytes | bytearray) -> bool:
    """Whether ``data`` holds a request a pool thread can parse without waiting for the client (or one it
    must read the rest of itself: Expect, chunked, larger than READ_AHEAD_BYTES, or a head too long)."""
    return _request_read(data)[0]


def _count_timeout(stage: str) -> None:
    from webhook.metrics import CLIENT_TIMEOUTS  # in the worker, after PROMETHEUS_MULTIPROC_DIR is set

    CLIENT_TIMEOUTS.labels(stage).inc()


class _DeadlineUnreader(SocketUnreader):
    """Socket reads a pool thread still makes for its request, each bounded by the request's deadline."""

    deadline = 0.0

    def chunk(self, size_hint: int | None = None) -> bytes:
        remaining = self.deadline - time.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)
            return super().chunk(size_hint)
        except TimeoutError:
            log.debug("closing a client that did not send its request in time")
            _count_timeout("read")
            raise NoMoreData(b"") from None


class _Outbox(io.BytesIO):
    """What gunicorn writes as a response on the poller, sent afterwards without blocking."""

    def sendall(self, data: bytes) -> None:
        self.write(data)

    def shutdown(self, how: int) -> None:  # gunicorn's close_graceful after a failed response: closed by the caller
        raise OSError("not a socket")


class _Conn(TConn):
    """A connection with the state the poller keeps while it shakes hands and reads a request."""

    def __init__(self, cfg: Any, sock: Any, client: Any, server: Any, write_timeout: float) -> None:
        super().__init__(cfg, sock, client, server)
        self.write_timeout = write_timeout
        self.stage = ""  # "handshake", "read" (the poller waits on the client) or "" (a pool thread has it)
        self.deadline = 0.0
        self.buffer = bytearray()
        self.complete = False  # the poller has read a whole request: the next enqueue goes to the pool
        self.watched = False  # registered with the poller by _watch (gthread's own keep-alive wait aside)

    def init(self) -> None:
        """Called by ThreadWorker.handle in the pool thread, after it made the socket blocking."""
        self.sock.settimeout(self.write_timeout)
        self.parser.unreader.deadline = self.deadline


class WebhookWorker(ThreadWorker):
    handshake_timeout = 5.0
    read_timeout = 5.0

    def init_process(self) -> None:
        self._handshaking: deque[tuple[float, _Conn]] = deque()  # deadline order: one timeout for all
        self._reading: deque[tuple[float, _Conn]] = deque()
        self._last_accept = self._accept_from = 0.0
        super().init_process()

    def set_accept_enabled(self, enabled: bool) -> None:
        """gthread's run loop asks for this on every turn: not before ``_accept_from``."""
        super().set_accept_enabled(enabled and time.monotonic() >= self._accept_from)

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        held = self._accept_from - time.monotonic()
        super().wait_for_and_dispatch_events(min(timeout, held) if held > 0 else timeout)

    # --- handshake ---------------------------------------------------------------------------------

    def accept(self, listener: Any) -> None:
        now = time.monotonic()
        if now < self._last_accept + ACCEPT_SPACING:  # a burst: another worker, idle, may take this one first
            self._accept_from = self._last_accept + ACCEPT_SPACING
            self.set_accept_enabled(False)
            return
        try:
            client, address = listener.accept()
        except (BlockingIOError, ConnectionAbortedError):
            return  # another worker took it, or the client gave up
        self._last_accept = now
        self.nr_conns += 1
        conn = _Conn(self.cfg, client, address, listener.getsockname(), self.read_timeout)
        try:
            conn.sock = gunicorn_sock.ssl_context(self.cfg).wrap_socket(
                client, server_side=True, do_handshake_on_connect=False,
                suppress_ragged_eofs=self.cfg.suppress_ragged_eofs)
        except OSError as exc:  # no usable certificate: this connection cannot be served, the worker goes on
            log.warning("cannot serve TLS on a new connection: %s", exc)
            self._close(conn)
            return
        self._wait(conn, "handshake", self._handshaking, self.handshake_timeout)
        self._handshake(conn)

    def _handshake(self, conn: _Conn, _fileobj: Any = None) -> None:
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._watch(conn, selectors.EVENT_READ, self._handshake)
            return
        except ssl.SSLWantWriteError:
            self._watch(conn, selectors.EVENT_WRITE, self._handshake)
            return
        except OSError as exc:  # not TLS, an untrusted client, a reset: nothing to answer
            log.debug("TLS handshake failed: %s", exc)
            self._close(conn)
            return
        self._new_parser(conn)
        conn.initialized = True
        self._start_reading(conn)

    def _new_parser(self, conn: _Conn) -> None:
        conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.parser.unreader = _DeadlineUnreader(conn.sock)

    # --- reading a request ------------------------------------------------------------------------

    def enqueue_req(self, conn: _Conn) -> None:
        """Every path to the pool (a kept-alive connection readable again, read-ahead left after a
        request) comes here on the main thread: only a complete request goes to a pool thread."""
        if conn.complete:
            conn.complete = False
            super().enqueue_req(conn)
        else:
            self._start_reading(conn)

    def _start_reading(self, conn: _Conn) -> None:
        conn.buffer = bytearray(conn.parser.unreader.take_buffered())
        if conn.sock.gettimeout() != 0.0:  # a pool thread's (read-ahead left after a request); a system call
            conn.sock.setblocking(False)
        self._wait(conn, "read", self._reading, self.read_timeout)
        self._read(conn)

    def _read(self, conn: _Conn, _fileobj: Any = None) -> None:
        try:
            while not (read := _request_read(conn.buffer))[0]:  # what is left after a pipelined request may be one
                data = conn.sock.recv(65536)
                if not data:
                    self._close(conn)
                    return
                conn.buffer += data
        except (ssl.SSLWantReadError, BlockingIOError):
            self._watch(conn, selectors.EVENT_READ, self._read)
            return
        except ssl.SSLWantWriteError:  # a TLS key update wants to write first
            self._watch(conn, selectors.EVENT_WRITE, self._read)
            return
        except OSError as exc:
            log.debug("reading a request failed: %s", exc)
            self._close(conn)
            return
        conn.stage = ""
        if read[1] and _ADMISSION.match(conn.buffer) and self._answer_here(conn):
            return
        self._unwatch(conn)
        conn.parser.unreader.unread(bytes(conn.buffer))
        conn.buffer = bytearray()
        conn.complete = True
        self.enqueue_req(conn)

    # --- answering on the poller ------------------------------------------------------------------

    def _answer_here(self, conn: _Conn) -> bool:
        """Answer the request in ``conn.buffer`` on this thread, as a pool thread would; False (the parser
        reset) when it needs a read, or does not parse: a pool thread answers it then."""
        conn.parser.unreader.unread(bytes(conn.buffer))
        sock, out = conn.sock, _Outbox()
        conn.sock = out  # gunicorn writes the response to conn.sock
        try:
            with cached_only():
                req = next(conn.parser)
                try:
                    keepalive = self._keepalive_after(conn, self.handle_request(req, conn))
                except NeedsRead:
                    raise
                except Exception as exc:  # what ThreadWorker.handle does, the socket errors aside (none here)
                    if not isinstance(exc, StopIteration):
                        self.handle_error(req, out, conn.client, exc)
                    keepalive = False
        except (NeedsRead, Exception):  # a read, or the parser's refusal, which the pool thread answers
            conn.sock = sock
            self._new_parser(conn)
            return False
        conn.sock = sock
        conn.buffer = bytearray()
        answer = out.getvalue()
        sent = 0
        try:
            while sent < len(answer):
                sent += sock.send(answer[sent:])
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
            pass
        except OSError as exc:
            log.debug("writing an answer failed: %s", exc)
            self._close(conn)
            return True
        if sent < len(answer):  # the client does not take it all now: a pool thread waits for it
            self._unwatch(conn)
            self._to_pool(conn, self._write_rest, conn, answer[sent:], keepalive)
        elif not keepalive:
            self._close(conn, graceful=True)
        elif conn.parser.unreader.buf.getvalue():  # pipelined: read on the poller's next turn, not recursively
            self._unwatch(conn)
            self.method_queue.defer(self._start_reading, conn)
        else:  # gthread's keep-alive wait, the socket left registered (only its callback changes)
            conn.set_timeout()
            self.keepalived_conns.append(conn)
            self._watch(conn, selectors.EVENT_READ, self._kept_alive_readable)
        return True

    def _kept_alive_readable(self, conn: _Conn, _fileobj: Any = None) -> None:
        self.keepalived_conns.remove(conn)
        self._start_reading(conn)

    def _write_rest(self, conn: _Conn, rest: bytes, keepalive: bool) -> bool:
        """In a pool thread: the rest of an answer, within the write timeout; whether to keep the connection."""
        try:
            conn.sock.settimeout(conn.write_timeout)
            conn.sock.sendall(rest)
        except OSError as exc:
            log.debug("writing an answer failed: %s", exc)
            return False
        return keepalive

    def _to_pool(self, conn: _Conn, job: Callable[..., bool], *args: Any) -> None:
        """``job`` in a pool thread, its result (keep the connection?) to gthread's ``finish_request``."""
        future = self.tpool.submit(job, *args)
        future.add_done_callback(lambda done: self.method_queue.defer(self.finish_request, conn, done))

    # --- the poller's bookkeeping -----------------------------------------------------------------

    def _wait(self, conn: _Conn, stage: str, queue: deque[tuple[float, _Conn]], timeout: float) -> None:
        conn.stage = stage
        conn.deadline = time.monotonic() + timeout
        queue.append((conn.deadline, conn))

    def _watch(self, conn: _Conn, events: int, callback: Any) -> None:
        handler = partial(callback, conn)
        if conn.watched:
            self.poller.modify(conn.sock, events, handler)
        else:
            self.poller.register(conn.sock, events, handler)
            conn.watched = True

    def _unwatch(self, conn: _Conn) -> None:
        """Stop waiting on ``conn`` (most requests arrive whole at once and never had to wait). Tracked rather than
        tried: the selector's KeyError for an unregistered socket formats its repr, two system calls."""
        if conn.watched:
            conn.watched = False
            with contextlib.suppress(KeyError, ValueError, OSError):  # closed meanwhile
                self.poller.unregister(conn.sock)

    def _close(self, conn: _Conn, graceful: bool = False) -> None:
        self._unwatch(conn)
        conn.stage = ""
        self.nr_conns -= 1
        conn.close(graceful)

    def murder_pending(self) -> None:
        """Also close the clients that did not finish their handshake or request in time (once a second)."""
        super().murder_pending()
        now = time.monotonic()
        for stage, queue in (("handshake", self._handshaking), ("read", self._reading)):
            while queue and queue[0][0] <= now:
                deadline, conn = queue.popleft()
                if conn.stage == stage and conn.deadline == deadline:
                    log.debug("closing a client that did not finish its %s in time: %s", stage, conn.client)
                    _count_timeout(stage)
                    self._close(conn)


def worker_class(handshake_timeout: float, read_timeout: float) -> type[WebhookWorker]:
    """The worker class for gunicorn's ``worker_class``, with the configured client timeouts."""
    return type("WebhookWorker", (WebhookWorker,), {"handshake_timeout": handshake_timeout,
                                                     "read_timeout": read_timeout})


class QuietAccessLogger(glogging.Logger):
    """gunicorn's logger, its access log on only when ``accesslog`` is set. gunicorn also counts a ``logconfig_dict``
    (ours routes its error log to JSON) as an access log, and then builds every request's access-log fields for a
    logger that writes nowhere: a tenth of a warm admission's time in the worker."""

    def _compute_access_log_enabled(self) -> bool:
        return bool(self.cfg.accesslog)
