"""In-process cluster components (scheduler, kubelets, garbage collector, node lifecycle and taint eviction
controllers, operators) and how they talk to the apiserver.

Each component is a thread that wakes on every store change and reconciles, and writes only
through the apiserver's REST layer under its own identity, so admission, validation and
conflicts apply to it exactly as to an external client.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from cluster.admission import User
from cluster.apiserver import ApiServer
from cluster.store import ApiError, Obj

log = logging.getLogger("kubenexus.cluster")


class Client:
    """A tiny REST client over ``ApiServer.handle`` for in-process components."""

    def __init__(self, api: ApiServer, user: User) -> None:
        self.api, self.user = api, user

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Obj:
        data = json.dumps(body).encode() if body is not None else b""
        response = self.api.handle(method, path, {"content-type": content_type}, data, self.user)
        if response.status >= 400:
            assert response.body is not None
            raise ApiError(response.status, response.body.get("reason", ""), response.body.get("message", ""))
        return response.body or {}

    def create(self, path: str, obj: Obj) -> Obj:
        return self.call("POST", path, obj)

    def patch(self, path: str, patch: Obj, kind: str = "merge") -> Obj:
        return self.call("PATCH", path, patch, f"application/{kind}-patch+json")


class Loop(threading.Thread):
    """Runs ``reconcile()`` after store changes (and at least every ``period`` seconds); only every ``period``
    seconds when ``on_change`` is False (a controller that polls, like PodGC).

    Changes arriving within ``coalesce`` seconds are handled by one reconcile, like a real
    controller's work queue: a burst of 1,000 pod creations is not 1,000 full passes.
    """

    period = 0.5
    coalesce = 0.05
    on_change = True

    def __init__(self, api: ApiServer, user: User) -> None:
        super().__init__(name=type(self).__name__, daemon=True)
        self.api, self.store, self.client = api, api.store, Client(api, user)
        self._halt = threading.Event()

    def reconcile(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        seen = -1
        while not self._halt.is_set():
            if not self.on_change:
                self._halt.wait(self.period)
            elif self.store.wait_for_change(seen, self.period) != seen:
                self._halt.wait(self.coalesce)
            if self._halt.is_set():
                return
            seen = self.store.resource_version
            try:
                self.reconcile()
            except Exception:  # a component keeps running, like a real controller with backoff
                log.exception("%s reconcile failed", self.name)

    def stop(self) -> None:
        self._halt.set()
