"""Carrying out releases: PATCH each member until it is released or gone, never give up in between.

Gates cannot be added back, so a release decided is a release owed: a failed patch is retried
with backoff; a patch whose ``test`` fails (the pod changed) is recomputed from a fresh read; a
pod that is gone (404, or a new pod under the same name) is done. Patches run on a small
thread pool so that a 100-member gang is released in parallel; the decision loop never waits.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from controller.engine import Release
from controller.release import release_patch
from gang import keys
from kube.client import api_request

log = logging.getLogger("kubenexus.controller")
Obj = dict[str, Any]
_PATCH = "application/json-patch+json"
_MAX_BACKOFF = 5.0
_UNPINNED_AFTER = 3  # rejected pinned patches on a fresh read before the member is released unpinned


def partial_pod(release: Release) -> Obj:
    """The pod as the controller knows it, enough to compute the release patch without a read."""
    pod = release.pod
    annotations = {keys.UNRESOLVED_ANNOTATION: ""} if pod.unresolved else {}
    spec: Obj = {"schedulingGates": [{"name": gate} for gate in pod.gates]}
    if pod.spec and pod.spec.get("affinity"):
        spec["affinity"] = pod.spec["affinity"]
    return {"metadata": {"uid": pod.uid, "annotations": annotations}, "spec": spec}


class Patcher:
    """Runs releases on a thread pool; reports each failed attempt through ``on_error``."""

    def __init__(self, api_client: Any, on_error: Callable[[str], None],
                 workers: int = 16, timeout: float = 10.0) -> None:
        self._client = api_client
        self._on_error = on_error
        self._timeout = timeout
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="release")
        self._stopped = threading.Event()

    def submit(self, release: Release, done: Callable[[bool], None]) -> None:
        """Release in the background; ``done(True)`` once the gate is gone, ``done(False)`` if the pod is."""
        self._pool.submit(self._run, release, done)

    def stop(self) -> None:
        self._stopped.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, release: Release, done: Callable[[bool], None]) -> None:
        try:
            done(self.release(release))
        except Exception:  # a bug here must not kill the pool thread silently
            log.exception("release of %s/%s failed", release.pod.namespace, release.pod.name)
            done(False)

    def release(self, release: Release) -> bool:
        pod = release.pod
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
        node, pin = release.node, release.pin
        body = release_patch(partial_pod(release), node, release.reserved_nodes, pin)
        attempt = rejected = 0
        while not self._stopped.is_set():
            try:
                status, raw = api_request(self._client, "PATCH", path, self._timeout, body, _PATCH)
            except Exception as exc:
                status, raw = 0, f"{type(exc).__name__}: {exc}".encode()
            if status == 200:
                return True
            if status == 404:
                return False
            if status in (409, 422):
                fresh = self._read(path)
                if fresh is None or (fresh.get("metadata") or {}).get("uid") != pod.uid:
                    return False
                gates = [g.get("name") for g in (fresh.get("spec") or {}).get("schedulingGates") or []]
                if keys.GANG_GATE not in gates:
                    return True
                rejected += 1
                if rejected >= _UNPINNED_AFTER and pin:
                    log.warning("pin of %s/%s to %s rejected: %s; releasing it unpinned",
                                pod.namespace, pod.name, node, raw[:300])
                    pin = False
                body = release_patch(fresh, node, release.reserved_nodes, pin)
                continue
            self._on_error(f"http_{status}" if status else "transport")
            log.warning("releasing %s/%s: HTTP %s %s; retrying", pod.namespace, pod.name, status, raw[:300])
            time.sleep(min(0.1 * 2 ** attempt, _MAX_BACKOFF))
            attempt += 1
        return False

    def _read(self, path: str) -> Obj | None:
        while not self._stopped.is_set():
            try:
                status, raw = api_request(self._client, "GET", path, self._timeout)
            except Exception:
                status, raw = 0, b""
            if status == 200:
                pod: Obj = json.loads(raw)
                return pod
            if status == 404:
                return None
            time.sleep(0.5)
        return None
