"""Reading owner objects: the API source, an in-memory source, and the bounded TTL cache.

The owner walk asks a source for objects by (apiVersion, kind, namespace, name). ``None``
means the object does not exist (404); :class:`LookupFailed` means we could not find out
(timeout, 5xx, 403, or the decision's :class:`Deadline` has passed) and the caller must not guess.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from gang import slim
from gang.kinds import Kind, api_path, split_api_version

Obj = dict[str, Any]
Key = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" if cluster-scoped), name


class LookupFailed(Exception):
    """The API could not answer; the reason is safe to show to users."""


class Deadline:
    """The moment all API reads for one decision must be done by (admission must answer in time)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._at = clock() + seconds

    def remaining(self) -> float:
        return self._at - self._clock()

    def __str__(self) -> str:
        return f"the {self.seconds:g}s deadline for this decision's API reads has passed"


class ObjectSource(Protocol):
    def get(self, kind: Kind, api_version: str, namespace: str | None, name: str,
            uid: str | None = None, deadline: Deadline | None = None) -> Obj | None:
        """The object, or None on 404. ``uid``, when given, is the uid the caller expects; API time
        spent is bounded by ``deadline`` (None: only by each read's own timeout)."""


def new_api_client(kubeconfig: str | None, pool_size: int, retries: int) -> Any:
    """An ApiClient from ``kubeconfig``, else in-cluster config, else the default kubeconfig."""
    from kubernetes import client
    from kubernetes import config as kube_config

    configuration = client.Configuration()
    if kubeconfig:
        kube_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        kube_config.load_incluster_config(client_configuration=configuration)
    else:
        kube_config.load_kube_config(client_configuration=configuration)
    configuration.retries = retries
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


def api_request(api_client: Any, method: str, path: str, timeout: float, body: Any = None,
                content_type: str | None = None) -> tuple[int, bytes]:
    """One raw JSON request through the official client's ApiClient (auth, TLS, proxy from its config).

    Objects stay plain dicts: the generated model classes cost far more than the work done here.
    Transport failures raise; HTTP errors are returned as their status.
    """
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    method, url, headers, data, _ = api_client.param_serialize(
        method, path, header_params=headers, body=body, auth_settings=["BearerToken"])
    response = api_client.call_api(method, url, headers, data, _request_timeout=timeout)
    return response.status, response.read()


class ApiSource:
    """Reads objects from the kube-apiserver through the official client's ApiClient.

    Objects are decoded slim (gang/slim.py): only what decisions read. Each read gets
    ``timeout_seconds``, or less when the caller's deadline is nearer; a failed read is tried again
    up to ``retries`` times while time is left. These are the only retries a deadline can bound: give
    this source a client that does not retry itself (``retries=0``) when a deadline must hold.
    """

    def __init__(
        self,
        api_client: Any,
        timeout_seconds: float,
        on_read: Callable[[str, str], None] | None = None,
        retries: int = 0,
    ) -> None:
        self._client = api_client
        self._timeout = timeout_seconds
        self._retries = retries
        self._on_read = on_read or (lambda kind, result: None)

    def _get(self, path: str, deadline: Deadline | None = None) -> tuple[int, bytes]:
        failure: Exception | None = None
        for _ in range(1 + self._retries):
            timeout = self._timeout if deadline is None else min(self._timeout, deadline.remaining())
            if timeout <= 0:
                break
            try:
                return api_request(self._client, "GET", path, timeout)
            except Exception as exc:  # any transport failure is "could not find out"
                failure = exc
        if failure is None:
            raise LookupFailed(f"GET {path}: not sent: {deadline}")
        raise LookupFailed(f"GET {path}: {type(failure).__name__}: {failure}") from failure

    def ping(self) -> None:
        """Raise LookupFailed unless the apiserver answers."""
        status, _ = self._get("/version")
        if status != 200:
            raise LookupFailed(f"GET /version: HTTP {status}")

    def get(self, kind: Kind, api_version: str, namespace: str | None, name: str,
            uid: str | None = None, deadline: Deadline | None = None) -> Obj | None:
        path = api_path(kind, api_version, namespace, name)
        try:
            status, body = self._get(path, deadline)
        except LookupFailed:
            self._on_read(kind.kind, "error")
            raise
        if status == 404:
            self._on_read(kind.kind, "not_found")
            return None
        if status != 200:
            self._on_read(kind.kind, "error")
            raise LookupFailed(f"GET {path}: HTTP {status}")
        self._on_read(kind.kind, "ok")
        try:
            obj = slim.decode(kind, body)
        except ValueError as exc:
            raise LookupFailed(f"GET {path}: response is not JSON") from exc
        if not isinstance(obj, dict):
            raise LookupFailed(f"GET {path}: response is not an object")
        return obj


class MemorySource:
    """Objects given up front (``kubenexus explain``, tests): a missing object is a 404."""

    def __init__(self, objects: Iterable[Obj]) -> None:
        self._objects: dict[tuple[str, str, str, str], Obj] = {}
        for obj in objects:
            meta = obj.get("metadata") or {}
            group, _ = split_api_version(str(obj.get("apiVersion", "")))
            key = (group, str(obj.get("kind", "")), meta.get("namespace") or "", str(meta.get("name", "")))
            self._objects[key] = obj

    def get(self, kind: Kind, api_version: str, namespace: str | None, name: str,
            uid: str | None = None, deadline: Deadline | None = None) -> Obj | None:
        group, _ = split_api_version(api_version)
        return self._objects.get((group, kind.kind, namespace or "", name))


# What one cache entry costs besides its object and key: the OrderedDict slot and link, the entry
# tuple with its float, and the expiry queue's tuple, float and slot (sys.getsizeof of each, CPython 3.11).
ENTRY_OVERHEAD = 104 + 64 + 24 + 56 + 24 + 8
SINGLE_FLIGHT_WAIT = 30.0  # how long a read without a deadline waits for a concurrent read of the same object


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
            if obj is not None and (self._max_bytes is None or size <= self._max_bytes):
                self._store(key, obj, size)
                self._on_size(len(self._entries), self._bytes)
            del self._inflight[key]
        done.set()
        return obj

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
