"""The owner cache in front of the API source: TTL + LRU, bounded in entries and bytes, single-flight."""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from gang.kinds import Kind
from gang.objects import Deadline, Key, LookupFailed, Obj, ObjectSource

# What one cache entry costs besides its object and key: the OrderedDict slot and link, the entry
# tuple with its float, and the expiry queue's tuple, float and slot (sys.getsizeof of each, CPython 3.11).
ENTRY_OVERHEAD = 104 + 64 + 24 + 56 + 24 + 8
SINGLE_FLIGHT_WAIT = 30.0  # how long a read without a deadline waits for a concurrent read of the same object


class NeedsRead(BaseException):  # noqa: N818 (not an error: a request to move)
    """A read :func:`cached_only` forbids: the caller answers the request elsewhere, where it may wait for I/O.

    A BaseException, so that it passes every handler that turns a failure into an answer (a pod admitted
    unchanged, an unresolved owner) on its way up to the code that set the mode."""


_mode = threading.local()


@contextmanager
def cached_only() -> Iterator[None]:
    """On this thread, a :class:`CachedSource` answers from its entries or raises :class:`NeedsRead`: it neither
    reads nor waits for a concurrent read."""
    _mode.cached_only = True
    try:
        yield
    finally:
        _mode.cached_only = False


def deep_size(value: Any) -> int:
    """Bytes held by a decoded JSON value (dicts, lists, strings, numbers), each object counted where it
    appears: an upper bound of what it keeps alive."""
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        for key, item in value.items():
            size += deep_size(key) + deep_size(item)
    elif isinstance(value, list | tuple):
        for item in value:
            size += deep_size(item)
    return size


class CachedSource:
    """Thread-safe TTL + LRU cache with single-flight: concurrent misses on one key cost one read.

    Bounded by entries and by bytes (each entry's measured size, :func:`deep_size`); expired entries
    are dropped as time passes, not only when pushed out. Only found objects are cached. A cached
    object whose uid differs from the one the caller expects was deleted and recreated under the
    same name: it is read again.
    """

    def __init__(self, inner: ObjectSource, ttl_seconds: float, max_entries: int, max_bytes: int | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_size: Callable[[int, int], None] | None = None) -> None:
        self._inner = inner
        self._on_size = on_size or (lambda entries, size: None)  # (entries, bytes) after each change
        self._ttl = ttl_seconds
        self._max = max_entries
        self._max_bytes = max_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[Key, tuple[float, Obj, int]] = OrderedDict()  # expiry, object, bytes
        self._expiry: deque[tuple[float, Key]] = deque()  # in expiry order: one ttl for all
        self._bytes = 0
        self._inflight: dict[Key, threading.Event] = {}
        self._superseded: set[Key] = set()  # reads in flight that ``refresh`` made stale: not stored

    @property
    def size(self) -> tuple[int, int]:
        """(entries, bytes) held now."""
        with self._lock:
            return len(self._entries), self._bytes

    def get(self, kind: Kind, api_version: str, namespace: str | None, name: str,
            uid: str | None = None, deadline: Deadline | None = None) -> Obj | None:
        key = (api_version, kind.kind, namespace or "", name)
        while True:
            with self._lock:
                now = self._clock()
                if self._expiry and self._expiry[0][0] <= now:
                    self._drop_expired(now)
                    self._on_size(len(self._entries), self._bytes)
                entry = self._entries.get(key)
                if entry and (not uid or _uid(entry[1]) == uid):
                    self._entries.move_to_end(key)
                    return entry[1]
                if getattr(_mode, "cached_only", False):
                    raise NeedsRead(key)
                waiter = self._inflight.get(key)
                if waiter is None:
                    done = self._inflight[key] = threading.Event()
                    break
            wait = SINGLE_FLIGHT_WAIT if deadline is None else min(deadline.remaining(), SINGLE_FLIGHT_WAIT)
            if wait <= 0:
                raise LookupFailed(f"waiting for a concurrent read of {kind.kind} {namespace or ''}/{name}: {deadline}")
            waiter.wait(timeout=wait)
        try:
            obj = self._inner.get(kind, api_version, namespace, name, uid, deadline)
        except BaseException:
            with self._lock:
                del self._inflight[key]
            done.set()
            raise
        size = deep_size(obj) + deep_size(key) + ENTRY_OVERHEAD if obj is not None else 0
        with self._lock:
            superseded = key in self._superseded
            self._superseded.discard(key)
            if obj is not None and not superseded and (self._max_bytes is None or size <= self._max_bytes):
                self._store(key, obj, size)
                self._on_size(len(self._entries), self._bytes)
            del self._inflight[key]
        done.set()
        return obj

    def refresh(self, keys: Iterable[Key], obj: Obj | None) -> None:
        """What a watch says an object is now (``obj``; None: deleted) under any of ``keys`` (one object, at the
        API versions it may have been read at): entries holding something else are replaced (``obj``, under the first
        key) or dropped, and reads of them in flight are not stored (they may have read the object before)."""
        with self._lock:
            for index, key in enumerate(keys):
                if key in self._inflight:
                    self._superseded.add(key)
                entry = self._entries.get(key)
                if entry is None or (obj is not None and index == 0 and entry[1] == obj):
                    continue
                del self._entries[key]
                self._bytes -= entry[2]
                if obj is not None and index == 0:
                    self._store(key, obj, deep_size(obj) + deep_size(key) + ENTRY_OVERHEAD)
            self._on_size(len(self._entries), self._bytes)

    def forget(self, kind: str) -> None:
        """Drop every entry of ``kind`` (a watch of it restarts: changes may have been missed meanwhile)."""
        with self._lock:
            for key in [k for k in self._entries if k[1] == kind]:
                self._bytes -= self._entries.pop(key)[2]
            self._superseded.update(k for k in self._inflight if k[1] == kind)
            self._on_size(len(self._entries), self._bytes)

    def _store(self, key: Key, obj: Obj, size: int) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[2]
        expires = self._clock() + self._ttl
        self._entries[key] = (expires, obj, size)
        self._bytes += size
        self._expiry.append((expires, key))
        while len(self._entries) > self._max or (self._max_bytes is not None and self._bytes > self._max_bytes):
            _, (_, _, evicted) = self._entries.popitem(last=False)
            self._bytes -= evicted
        if len(self._expiry) > 2 * len(self._entries) + 64:  # stale marks of replaced or evicted entries
            self._expiry = deque(sorted((entry[0], k) for k, entry in self._entries.items()))

    def _drop_expired(self, now: float) -> None:
        while self._expiry and self._expiry[0][0] <= now:
            expires, key = self._expiry.popleft()
            entry = self._entries.get(key)
            if entry is not None and entry[0] == expires:
                del self._entries[key]
                self._bytes -= entry[2]


def _uid(obj: Obj) -> str | None:
    return (obj.get("metadata") or {}).get("uid")
