"""A reflector/informer like client-go's, for plain JSON dicts.

``Informer.run()`` LISTs a collection (paginated with ``limit``/``continue`` when the server
paginates), delivers every item, then WATCHes from the list's resourceVersion with bookmarks,
reconnecting when the server ends the watch and re-listing when the resourceVersion is gone
(410, as an HTTP status or as an ERROR event). Objects stay plain dicts parsed by ``json``:
the controller holds 100,000 pods, far too many for the client's model classes.

What the consumer sees, through ``on_event(type, obj)``:

* first list: ``("ADDED", obj)`` for every item, then ``on_synced()`` (once, ever);
* watch: ``ADDED``/``MODIFIED``/``DELETED`` as the server sends them (a selector watch also
  sends ``ADDED``/``DELETED`` when an object enters or leaves the selection); bookmarks only
  move the resourceVersion and are never delivered; ``on_watching(True)`` when a watch stream
  opens and ``on_watching(False)`` when it ends, so a consumer can tell when what it holds is current;
* ``current_only``: no list is delivered: changes from now on only, each (re)start of the watch preceded by
  ``("RESET", {})`` (changes made while it was not watching were missed); for consumers that keep only what they
  came across otherwise (a cache to keep fresh), not every object;
* re-list (after 410 or repeated failures): a replace, page by page. ``("ADDED", obj)`` for new
  objects and ``("MODIFIED", obj)`` for known ones whose resourceVersion changed; objects the
  consumer already has at the same resourceVersion are not delivered again. A known object the
  new list no longer holds gets ``("DELETED", stub)``: ``stub`` is not the last state (that was
  never seen) but ``{"metadata": {"name", "namespace", "uid", "resourceVersion"}, FINAL_STATE_UNKNOWN: True}``
  (the resourceVersion is the last one delivered), to be deleted by uid. It comes right before
  the object that took its namespace/name under a new uid (so a consumer keyed by name never
  loses the new one), otherwise once the whole list is in (as client-go's Replace does).

Each page is decoded and delivered as it arrives, so the informer never holds more than one page;
between deliveries it keeps only uid -> (namespace, name, resourceVersion). ``decoder`` picks what
is decoded (``slim.PODS`` keeps only what the controller reads; the default keeps everything).
Callbacks run on the thread that called ``run()``; an exception in one is logged and the informer
carries on. While a list is fetched, parsed and delivered the cyclic GC is paused (see
``_gc_paused``). A consumer that keeps every object may want ``gc.freeze()`` once synced, so later
full collections skip that cache.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from gang.objects import Obj

__all__ = ["FINAL_STATE_UNKNOWN", "FULL", "Decoder", "Gone", "Informer"]

log = logging.getLogger(__name__)


#: Key set (to True) on the stub delivered as DELETED for an object that vanished while the informer
#: was not watching: its final state is unknown, only its identity (client-go: DeletedFinalStateUnknown).
FINAL_STATE_UNKNOWN = "finalStateUnknown"

class Decoder:
    """``page(bytes)`` for a LIST response and ``event(bytes)`` for one watch line, as dicts.

    A watch ERROR event carries a Status, not a pod: it is decoded in full so its code and message survive.
    Malformed input raises ``ValueError`` like ``json.loads``.
    """

    def __init__(self, page: Callable[[bytes], Obj], event: Callable[[bytes], Obj]) -> None:
        self._page = page
        self._event = event

    def page(self, body: bytes) -> Obj:
        try:
            return self._page(body)
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            raise ValueError(str(exc)) from exc

    def event(self, line: bytes) -> Obj:
        try:
            event = self._event(line)
        except msgspec.DecodeError as exc:
            raise ValueError(str(exc)) from exc
        return msgspec.json.decode(line) if event.get("type") == "ERROR" else event

#: Everything as ``json.loads`` gives it: for collections a caller does not slim.
FULL = Decoder(msgspec.json.Decoder().decode, msgspec.json.Decoder().decode)

class Gone(Exception):
    """The resourceVersion (or continue token) is too old: only a fresh list can resume."""

class _Failure(Exception):
    """A list or watch attempt failed in a way a retry may fix."""

class Informer:
    def __init__(
        self,
        api_client: Any,
        path: str,
        on_event: Callable[[str, Obj], None],
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        on_synced: Callable[[], None] | None = None,
        on_error: Callable[[str], None] | None = None,
        on_watching: Callable[[bool], None] | None = None,
        page_size: int = 500,
        request_timeout: float = 60.0,
        backoff_initial: float = 0.2,
        backoff_max: float = 5.0,
        decoder: Decoder = FULL,
        current_only: bool = False,
    ) -> None:
        self.decoder = decoder
        self.current_only = current_only
        self._client = api_client
        self.path = path
        self._on_event = on_event
        self._on_synced = on_synced
        self._on_error = on_error
        self._on_watching = on_watching
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.timeout_seconds = timeout_seconds
        self.page_size = page_size
        self.request_timeout = request_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        # uid -> (namespace, name, resourceVersion) of every object the consumer holds.
        self._known: dict[str, tuple[str | None, str, str]] = {}
        self._rv = ""
        self._synced = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None  # the urllib3 response being read, closed by stop()
        self._failures = 0
        self.lists = 0  # how many LISTs completed (1 + relists); for metrics and tests

    # --- public --------------------------------------------------------------------------

    @property
    def synced(self) -> threading.Event:
        """Set once the first list has been delivered (and stays set)."""
        return self._synced

    @property
    def resource_version(self) -> str:
        """The resourceVersion the next watch starts from ("" before the first list)."""
        return self._rv

    def known(self) -> int:
        """How many objects the consumer holds, as far as this informer delivered them."""
        return len(self._known)

    def run(self) -> None:
        """List, then watch until ``stop()``; never raises for API or transport failures."""
        need_list = True
        while not self._stopped.is_set():
            try:
                if need_list:
                    with _gc_paused():
                        self._list()
                    need_list = False
                    self._failures = 0
                    if not self._synced.is_set():
                        self._synced.set()
                        self._call(self._on_synced)
                self._watch()
            except Gone as exc:
                if self._stopped.is_set():
                    break
                if need_list:  # even a fresh list was gone (an expired continue token): back off first
                    self._fail(str(exc))
                else:
                    log.info("%s: %s; re-listing", self.path, exc)
                    need_list = True
            except _Failure as exc:
                if self._stopped.is_set():
                    break
                self._fail(str(exc))
                if self._failures >= 3 and not need_list:
                    need_list = True  # the watch keeps failing: start over, as client-go's reflector would
            except Exception as exc:  # a bug of ours or an unexpected response: keep the informer alive
                if self._stopped.is_set():
                    break
                log.exception("%s: informer error", self.path)
                self._fail(f"{type(exc).__name__}: {exc}")
        self._close_response()

    def stop(self) -> None:
        """Make ``run()`` return promptly: ends backoff waits and the request being read."""
        self._stopped.set()
        self._interrupt()

    # --- list --------------------------------------------------------------------------

    def _list(self) -> None:
        if self.current_only:
            self._list_current()
            return
        fresh: set[str] = set()
        renamed = {(ns, name): uid for uid, (ns, name, _) in self._known.items()} if self._known else {}
        token = ""
        rv = ""
        while True:
            query: list[tuple[str, str]] = self._selectors()
            if self.page_size:
                query.append(("limit", str(self.page_size)))
            if token:
                query.append(("continue", token))
            status, body = self._request(query, stream=False)
            if status == 410:
                raise Gone(f"list continue token expired: {_message(body)}")
            if status != 200:
                raise _Failure(f"LIST {self.path}: HTTP {status}: {_message(body)}")
            try:
                page = self.decoder.page(body)
                meta = page.get("metadata") or {}
                items = page.get("items") or []
                if not isinstance(items, list) or not all(isinstance(obj.get("metadata"), dict) for obj in items):
                    raise TypeError("items without metadata")
            except (ValueError, AttributeError, TypeError) as exc:
                raise _Failure(f"LIST {self.path}: response is not a list: {exc}") from exc
            del body, page
            self._deliver_page(items, fresh, renamed)
            del items
            rv = meta.get("resourceVersion") or rv
            token = meta.get("continue") or ""
            if not token or self._stopped.is_set():
                break
        if self._stopped.is_set():
            return
        for uid in [uid for uid in self._known if uid not in fresh]:
            self._deliver("DELETED", _stub(uid, *self._known.pop(uid)))
        self._rv = rv
        self.lists += 1

    def _list_current(self) -> None:
        """``current_only``: one item is listed, only for the collection's resourceVersion to watch from; ``RESET``
        tells the consumer that changes before it may have been missed (what it holds from earlier events is stale)."""
        status, body = self._request([*self._selectors(), ("limit", "1")], stream=False)
        if status != 200:
            raise _Failure(f"LIST {self.path}: HTTP {status}: {_message(body)}")
        try:
            rv = (json.loads(body).get("metadata") or {}).get("resourceVersion") or ""
        except (ValueError, AttributeError) as exc:
            raise _Failure(f"LIST {self.path}: response is not a list: {exc}") from exc
        self._deliver("RESET", {})
        self._rv = rv
        self.lists += 1

    def _deliver_page(self, items: list[Obj], fresh: set[str], renamed: dict[tuple[str | None, str], str]) -> None:
        known = self._known
        deliver = self._deliver
        for obj in items:
            meta = obj["metadata"]
            uid = meta.get("uid") or _key(meta)
            fresh.add(uid)
            entry = (meta.get("namespace"), meta.get("name", ""), meta.get("resourceVersion", ""))
            previous = known.get(uid)
            if previous is None and renamed:
                old = renamed.pop(entry[:2], None)
                if old is not None and old != uid and old in known and old not in fresh:
                    deliver("DELETED", _stub(old, *known.pop(old)))
            known[uid] = entry
            if previous is None:
                deliver("ADDED", obj)
            elif previous[2] != entry[2]:
                deliver("MODIFIED", obj)

    # --- watch -------------------------------------------------------------------------

    def _watch(self) -> None:
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("resourceVersion", self._rv),
                 ("timeoutSeconds", str(self.timeout_seconds)), *self._selectors()]
        began = time.monotonic()
        status, response = self._request(query, stream=True)
        if status == 410:
            raise Gone(f"watch from {self._rv}: {_message(response)}")
        if status != 200:
            raise _Failure(f"WATCH {self.path}: HTTP {status}: {_message(response)}")
        lines = 0
        self._call(self._on_watching, True)
        try:
            for line in _lines(response):
                if self._stopped.is_set():
                    return
                lines += 1
                self._handle(line)
        except (Gone, _Failure):
            raise
        except Exception as exc:  # the connection broke mid-stream
            if self._stopped.is_set():
                return
            raise _Failure(f"WATCH {self.path}: stream broke: {type(exc).__name__}: {exc}") from exc
        finally:
            self._call(self._on_watching, False)
            self._close_response()
        if lines:
            self._failures = 0
        elif time.monotonic() - began < min(1.0, self.timeout_seconds / 2) and not self._stopped.is_set():
            raise _Failure(f"WATCH {self.path}: closed at once without an event")

    def _handle(self, line: bytes) -> None:
        try:
            event = self.decoder.event(line)
            kind, obj = event["type"], event["object"]
            if not isinstance(obj, dict):
                raise TypeError("object is not a JSON object")
        except (ValueError, KeyError, TypeError) as exc:
            raise _Failure(f"WATCH {self.path}: undecodable event: {line[:200]!r}") from exc
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone(f"watch from {self._rv}: {obj.get('message', 'Gone')}")
            raise _Failure(f"WATCH {self.path}: error event: {obj}")
        meta = obj.get("metadata") or {}
        rv = meta.get("resourceVersion")
        if kind == "BOOKMARK":
            if rv:
                self._rv = rv
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("%s: unknown watch event type %r", self.path, kind)
            return
        uid = meta.get("uid") or _key(meta)
        if self.current_only:
            pass  # nothing is held: a re-list starts from now (RESET)
        elif kind == "DELETED":
            self._known.pop(uid, None)
        else:
            self._known[uid] = (meta.get("namespace"), meta.get("name", ""), rv or "")
        if rv:
            self._rv = rv
        self._deliver(kind, obj)

    # --- plumbing ----------------------------------------------------------------------

    def _selectors(self) -> list[tuple[str, str]]:
        query = []
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        if self.field_selector:
            query.append(("fieldSelector", self.field_selector))
        return query

    def _request(self, query: list[tuple[str, str]], stream: bool) -> tuple[int, Any]:
        """(status, body bytes) or, with ``stream`` and a 200, (200, the open urllib3 response)."""
        timeout: Any = (10.0, self.timeout_seconds + 30.0) if stream else (10.0, self.request_timeout)
        try:
            method, url, headers, _, _ = self._client.param_serialize(
                "GET", self.path, query_params=query, header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"])
            rest = self._client.call_api(method, url, headers, _request_timeout=timeout)
        except Exception as exc:
            raise _Failure(f"GET {self.path}: {type(exc).__name__}: {exc}") from exc
        raw = getattr(rest, "response", rest)  # kubernetes' RESTResponse wraps the urllib3 response
        with self._lock:
            self._response = raw
        if self._stopped.is_set():  # stop() came while the request was on its way
            self._close_response()
            raise _Failure("stopped")
        if stream and rest.status == 200:
            return 200, raw
        try:
            return rest.status, rest.read()
        except Exception as exc:
            raise _Failure(f"GET {self.path}: reading the body: {type(exc).__name__}: {exc}") from exc
        finally:
            self._close_response()

    def _close_response(self) -> None:
        with self._lock:
            response, self._response = self._response, None
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()

    def _interrupt(self) -> None:
        """Wake the run thread if it is blocked reading a response; it closes the response itself.

        Only a socket shutdown wakes a thread blocked in recv: close() from here would wait for the
        reader's buffer lock instead. A response with no connection has been read to the end.
        """
        with self._lock:
            response = self._response
            sock = getattr(getattr(response, "connection", None), "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def _deliver(self, kind: str, obj: Obj) -> None:
        try:
            self._on_event(kind, obj)
        except Exception:
            log.exception("%s: on_event(%s) failed", self.path, kind)

    def _call(self, callback: Callable[..., None] | None, *args: Any) -> None:
        if callback is None:
            return
        try:
            callback(*args)
        except Exception:
            log.exception("%s: callback failed", self.path)

    def _fail(self, message: str) -> None:
        log.warning("%s: %s", self.path, message)
        self._call(self._on_error, message)
        delay = min(self.backoff_max, self.backoff_initial * 2 ** self._failures)
        self._failures += 1
        self._stopped.wait(delay * random.uniform(0.5, 1.0))

def _lines(response: Any) -> Iterator[bytes]:
    """The lines of a streamed body as they arrive (one watch event each)."""
    if getattr(response, "chunked", False) and hasattr(response, "read_chunked"):
        chunks: Iterator[bytes] = response.read_chunked(decode_content=True)
    else:
        chunks = iter(lambda: response.read1(65536), b"")
    pending: list[bytes] = []  # the start of a line split across chunks
    for chunk in chunks:
        if b"\n" not in chunk:
            pending.append(chunk)
            continue
        if pending:
            pending.append(chunk)
            chunk, pending = b"".join(pending), []
        *complete, tail = chunk.split(b"\n")
        if tail:
            pending.append(tail)
        for line in complete:
            if line.strip():
                yield line
    rest = b"".join(pending)
    if rest.strip():
        yield rest

@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic GC paused while a list is fetched, parsed and delivered.

    A list of 100k pods allocates millions of dicts and lists; the collector would run over and over
    on the growing heap and more than double the time (json.loads alone: ~1.3 s paused, ~4 s not).
    The objects are acyclic, so pausing costs nothing. Re-enabled only if it was enabled before.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()

def _key(meta: dict[str, Any]) -> str:
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name', '')}" if namespace else meta.get("name", "")

def _stub(uid: str, namespace: str | None, name: str, rv: str) -> Obj:
    meta: dict[str, Any] = {"name": name, "uid": uid, "resourceVersion": rv}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"metadata": meta, FINAL_STATE_UNKNOWN: True}

def _message(body: Any) -> str:
    """The message of a metav1.Status body, or the start of whatever came back."""
    if not isinstance(body, bytes | bytearray):
        with contextlib.suppress(Exception):
            body = body.read()
    if not isinstance(body, bytes | bytearray):
        return ""
    try:
        status = json.loads(body)
        return str(status.get("message") or status.get("reason") or "")
    except (ValueError, AttributeError):
        return body[:200].decode("utf-8", "replace")
