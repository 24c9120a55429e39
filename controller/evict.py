"""Carrying out evictions and repairs: DELETE a pod (its operator recreates it through admission), or PATCH it.

Deletes carry preconditions so that only the pod the decision was about goes: its uid (a pod
recreated under the same name stays) and, for a pod that escaped admission and is not bound,
its resourceVersion (if it was bound meanwhile, the 409 leaves it to the next check, which
counts it in its gang instead). A pod that is gone (404) or changed (409) is done; transport
errors and 5xx are retried with backoff. Requests run on a small thread pool: the decision loop
never waits, and learns the outcome from the watch (and from ``done``, given the final HTTP status,
0 when the request kept failing).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kube.client import api_request

log = logging.getLogger("kubenexus.controller")
Obj = dict[str, Any]
_MAX_BACKOFF = 5.0
_ATTEMPTS = 8  # then give up: the next pass decides again
# Final answers: done (the pod is gone or changed) or refused (RBAC, validation: retrying cannot help).
GONE = (200, 202, 404, 409)
DONE = (200, 202)  # the request did what it asked (404 and 409: the pod was already gone, or is not the one meant)


class Evictor:
    """DELETEs and PATCHes pods in the background; ``on_error(reason)`` counts every failed attempt."""

    def __init__(self, api_client: Any, on_error: Callable[[str], None], workers: int = 8,
                 timeout: float = 10.0) -> None:
        self._client = api_client
        self._on_error = on_error
        self._timeout = timeout
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="evict")
        self._stopped = threading.Event()

    def delete(self, namespace: str, name: str, uid: str, done: Callable[[int], None],
               resource_version: str = "") -> None:
        """DELETE the pod if it still is ``uid`` (at ``resource_version``); ``done(status)`` with the final HTTP
        status (0: it kept failing)."""
        preconditions = {"uid": uid} | ({"resourceVersion": resource_version} if resource_version else {})
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions}
        self._submit("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body, None, done)

    def patch(self, namespace: str, name: str, patch: list[Obj], done: Callable[[int], None]) -> None:
        """JSON-PATCH the pod (the patch carries its own ``test`` guards)."""
        self._submit("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", patch, "application/json-patch+json",
                     done)

    def disrupt(self, namespace: str, name: str, uid: str, reason: str, message: str,
                done: Callable[[int], None]) -> None:
        """Preempt the pod as kube-scheduler preempts: its ``DisruptionTarget`` condition (``reason``, ``message``:
        a Job's ``podFailurePolicy`` can tell a preemption from a failure by it), then a DELETE with its own grace
        period, if it still is ``uid``; ``done`` with the DELETE's final status (or the PATCH's, when it failed)."""
        self._pool.submit(self._disrupt, namespace, name, uid, reason, message, done)

    def _disrupt(self, namespace: str, name: str, uid: str, reason: str, message: str,
                 done: Callable[[int], None]) -> None:
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        condition = {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message,
                     "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        body = {"metadata": {"uid": uid}, "status": {"conditions": [condition]}}
        try:
            status = self._request("PATCH", f"{path}/status", body, "application/strategic-merge-patch+json")
            if status in (200, 201):
                preconditions = {"uid": uid}
                status = self._request("DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions",
                                                        "preconditions": preconditions}, None)
            done(status)
        except Exception:  # a bug here must not kill the pool thread silently
            log.exception("preempting %s failed", path)
            done(0)

    def stop(self) -> None:
        self._stopped.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _submit(self, method: str, path: str, body: Any, content_type: str | None,
                done: Callable[[int], None]) -> None:
        self._pool.submit(self._run, method, path, body, content_type, done)

    def _run(self, method: str, path: str, body: Any, content_type: str | None, done: Callable[[int], None]) -> None:
        try:
            done(self._request(method, path, body, content_type))
        except Exception:  # a bug here must not kill the pool thread silently
            log.exception("%s %s failed", method, path)
            done(0)

    def _request(self, method: str, path: str, body: Any, content_type: str | None) -> int:
        for attempt in range(_ATTEMPTS):
            if self._stopped.is_set():
                return 0
            try:
                status, raw = api_request(self._client, method, path, self._timeout, body, content_type)
            except Exception as exc:
                status, raw = 0, f"{type(exc).__name__}: {exc}".encode()
            if status in GONE or (method == "PATCH" and status == 422):  # 422: a failed test, the pod changed
                return status
            self._on_error(f"http_{status}" if status else "transport")
            log.warning("%s %s: HTTP %s %s", method, path, status, raw[:300])
            if status in (400, 401, 403):
                return status
            time.sleep(min(0.1 * 2 ** attempt, _MAX_BACKOFF))
        return 0
