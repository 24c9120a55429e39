"""Reading owner objects: the API source, an in-memory source, and the bounded TTL cache.

The owner walk asks a source for objects by (apiVersion, kind, namespace, name). ``None``
means the object does not exist (404); :class:`LookupFailed` means we could not find out
(timeout, 5xx, 403) and the caller must not guess.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from gang.kinds import Kind, api_path, split_api_version

Obj = dict[str, Any]
Key = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" if cluster-scoped), name


class LookupFailed(Exception):
    """The API could not answer; the reason is safe to show to users."""


class ObjectSource(Protocol):
    def get(self, kind: Kind, api_version: str, namespace: str | None, name: str,
            uid: str | None = None) -> Obj | None:
        """The object, or None on 404. ``uid``, when given, is the uid the caller expects."""


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
    """Reads objects from the kube-apiserver through the official client's ApiClient."""

    def __init__(
        self,
        api_client: Any,
        timeout_seconds: float,
        on_read: Callable[[str, str], None] | None = None,
    ) -> None:
        self._client = api_client
        self._timeout = timeout_seconds
        self._on_read = on_read or (lambda kind, result: None)

    def _get(self, path: str) -> tuple[int, bytes]:
        try:
            return api_request(self._client, "GET", path, self._timeout)
        except Exception as exc:  # any transport failure is "could not find out"
            raise LookupFailed(f"GET {path}: {type(exc).__name__}: {exc}") from exc

    def ping(self) -> None:
        """Raise LookupFailed unless the apiserver answers (readiness)."""
        status, _ = self._get("/version")
        if status != 200:
            raise LookupFailed(f"GET /version: HTTP {status}")

    def get(self, kind: Kind, api_version: str, namespace: str | None, name: str,
            uid: str | None = None) -> Obj | None:
        path = api_path(kind, api_version, namespace, name)
        try:
            status, body = self._get(path)
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
            obj = json.loads(body)
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
            uid: str | None = None) -> Obj | None:
        group, _ = split_api_version(api_version)
        return self._objects.get((group, kind.kind, namespace or "", name))


class CachedSource:
    """Thread-safe TTL + LRU cache with single-flight: concurrent misses on one key cost one read.

    Only found objects are cached. A cached object whose uid differs from the one the caller
    expects was deleted and recreated under the same name: it is read again.
    """

    def __init__(self, inner: ObjectSource, ttl_seconds: float, max_entries: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._inner = inner
        self._ttl = ttl_seconds
        self._max = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[Key, tuple[float, Obj]] = OrderedDict()
        self._inflight: dict[Key, threading.Event] = {}

    def get(self, kind: Kind, api_version: str, namespace: str | None, name: str,
            uid: str | None = None) -> Obj | None:
        key = (api_version, kind.kind, namespace or "", name)
        while True:
            with self._lock:
                entry = self._entries.get(key)
                if entry and entry[0] > self._clock() and (not uid or _uid(entry[1]) == uid):
                    self._entries.move_to_end(key)
                    return entry[1]
                waiter = self._inflight.get(key)
                if waiter is None:
                    done = self._inflight[key] = threading.Event()
                    break
            waiter.wait(timeout=30)
        try:
            obj = self._inner.get(kind, api_version, namespace, name, uid)
        except BaseException:
            with self._lock:
                del self._inflight[key]
            done.set()
            raise
        with self._lock:
            if obj is not None:
                self._entries[key] = (self._clock() + self._ttl, obj)
                self._entries.move_to_end(key)
                while len(self._entries) > self._max:
                    self._entries.popitem(last=False)
            del self._inflight[key]
        done.set()
        return obj


def _uid(obj: Obj) -> str | None:
    return (obj.get("metadata") or {}).get("uid")
