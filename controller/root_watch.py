"""The gate controller's watch of every root resource the adapters serve (``controller/roots.py`` says why).

One informer per resource the cluster serves, found by discovery (``GET /apis/<group>/<version>``): a kind whose
operator is not installed (its CRD absent) is not watched, and discovery is asked again every ``recheck`` seconds so
that a CRD installed later is picked up. Objects are decoded slim (``controller/slim.py``: their identity and
annotations, nothing of their spec). What it learns goes to the decision loop through ``deliver`` (the loop alone
touches the state): ``("root", event type, {"group", "kind", "object"})`` for objects and
``("root-watch", problem, {"group", "version", "kind"})`` when a resource's watch has listed everything (problem "")
or cannot (why: not served, forbidden, failing).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from controller import slim
from gang.adapters.table import ROOT_RESOURCES
from kube.client import api_request
from kube.informer import Informer

log = logging.getLogger("kubenexus.controller")
RECHECK_SECONDS = 60.0
Deliver = Callable[[tuple[str, str, dict[str, Any]]], None]


class RootWatch:
    def __init__(self, api_client: Any, deliver: Deliver, *, timeout: float = 10.0,
                 recheck: float = RECHECK_SECONDS) -> None:
        self._client = api_client
        self._deliver = deliver
        self._timeout = timeout
        self._recheck = recheck
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self.informers: dict[tuple[str, str, str], Informer] = {}  # (group, version, plural) -> its informer
        self._threads: list[threading.Thread] = []

    def run(self) -> None:
        """Discover, start informers for what is served, and discover again while something is not."""
        while not self._stopped.is_set():
            missing = [r for r in ROOT_RESOURCES if (r.group, r.version, r.plural) not in self.informers]
            for resource in missing:
                problem = self._served(resource.group, resource.version, resource.plural)
                if problem is None:
                    self._start(resource.group, resource.version, resource.kind, resource.plural)
                else:
                    self._status(resource.group, resource.version, resource.kind, problem)
            if not missing or self._stopped.wait(self._recheck):
                return

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            for informer in self.informers.values():
                informer.stop()

    def _served(self, group: str, version: str, plural: str) -> str | None:
        """None when the cluster serves the resource, else why not."""
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            status, body = api_request(self._client, "GET", path, self._timeout)
        except Exception as exc:  # transport: asked again at the next recheck
            return f"discovery of {group}/{version} failed: {type(exc).__name__}: {exc}"
        if status == 404:
            return f"the cluster does not serve {group}/{version} (is the operator's CRD installed?)"
        if status != 200:
            return f"discovery of {group}/{version}: HTTP {status}"
        try:
            names = {r.get("name") for r in json.loads(body).get("resources") or [] if isinstance(r, dict)}
        except (ValueError, AttributeError):
            return f"discovery of {group}/{version}: not an APIResourceList"
        return None if plural in names else f"the cluster does not serve {plural} in {group}/{version}"

    def _start(self, group: str, version: str, kind: str, plural: str) -> None:
        identity = {"group": group, "version": version, "kind": kind}

        def on_event(event: str, obj: dict[str, Any]) -> None:
            self._deliver(("root", event, {"group": group, "kind": kind, "object": obj}))

        def on_error(message: str) -> None:
            if not informer.synced.is_set():  # once listed, what it holds stays valid while it reconnects
                self._deliver(("root-watch", message, identity))

        informer = Informer(self._client, f"/apis/{group}/{version}/{plural}", on_event, decoder=slim.ROOTS,
                            on_synced=lambda: self._deliver(("root-watch", "", identity)), on_error=on_error,
                            request_timeout=self._timeout * 3, backoff_max=30.0)
        with self._lock:
            if self._stopped.is_set():
                return
            self.informers[(group, version, plural)] = informer
        thread = threading.Thread(target=informer.run, name=f"informer-{plural}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _status(self, group: str, version: str, kind: str, problem: str) -> None:
        self._deliver(("root-watch", problem, {"group": group, "version": version, "kind": kind}))
