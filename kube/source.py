"""Owner objects read from the kube-apiserver, slim, within the decision's deadline."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from typing import Any

from gang import slim
from gang.kinds import Kind, api_path
from gang.objects import Deadline, LookupFailed, Obj
from kube.client import api_request


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

    def list_named(self, kind: Kind, api_version: str, namespace: str | None, name: str,
                   deadline: Deadline | None = None) -> Obj | None:
        """The object, read by a LIST with a field selector on its name (for a caller allowed to list, not to get),
        decoded in full: None when the list is empty."""
        path = api_path(kind, api_version, namespace, "").rstrip("/")
        query = urllib.parse.urlencode({"fieldSelector": f"metadata.name={name}"})
        try:
            status, body = self._get(f"{path}?{query}", deadline)
        except LookupFailed:
            self._on_read(kind.kind, "error")
            raise
        if status != 200:
            self._on_read(kind.kind, "error")
            raise LookupFailed(f"LIST {path} ({name}): HTTP {status}")
        try:
            items = json.loads(body).get("items") or []
        except (ValueError, AttributeError) as exc:
            raise LookupFailed(f"LIST {path} ({name}): response is not a list") from exc
        self._on_read(kind.kind, "ok" if items else "not_found")
        return items[0] if items and isinstance(items[0], dict) else None

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
