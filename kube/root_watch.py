"""Watches of every root resource the adapters serve (PyTorchJob, JobSet, ...), found by discovery.

Both components need what users write on roots as it is now, not as it was when last read: the gate controller
the constraints a gang asks (``controller/roots.py``), the webhook the opt-in and sizes it decides new pods with
(``kube/fresh_roots.py``). Each passes ``make`` (an informer of one resource, decoded and delivered its own way) and
``status`` (per resource: "" once its watch is up, else why not).

A resource is watched only when the cluster serves it (``GET /apis/<group>/<version>``): a kind whose operator is not
installed is not, and discovery is asked again every ``recheck`` seconds, so that a CRD installed later is picked up.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from gang.adapters.table import ROOT_RESOURCES
from gang.adapters.table import RootResource as Resource
from kube.client import api_request
from kube.informer import Informer

RECHECK_SECONDS = 60.0
NOT_SERVED = "the cluster does not serve"  # how a status that says "no such resource here" begins


class RootWatch:
    def __init__(self, api_client: Any, make: Callable[[Resource], Informer], status: Callable[[Resource, str], None],
                 *, timeout: float = 10.0, recheck: float = RECHECK_SECONDS) -> None:
        self._client = api_client
        self._make, self._status = make, status
        self._timeout = timeout
        self._recheck = recheck
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self.informers: dict[Resource, Informer] = {}

    def start(self) -> RootWatch:
        threading.Thread(target=self.run, name="root-discovery", daemon=True).start()
        return self

    def run(self) -> None:
        """Discover, start informers for what is served, and discover again while something is not."""
        while not self._stopped.is_set():
            missing = [r for r in ROOT_RESOURCES if r not in self.informers]
            for resource in missing:
                problem = self._served(resource)
                if problem is None:
                    self._start(resource)
                else:
                    self._status(resource, problem)
            if not missing or self._stopped.wait(self._recheck):
                return

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            for informer in self.informers.values():
                informer.stop()

    def _served(self, resource: Resource) -> str | None:
        """None when the cluster serves the resource, else why not."""
        group_version = f"{resource.group}/{resource.version}"
        try:
            status, body = api_request(self._client, "GET", f"/apis/{group_version}", self._timeout)
        except Exception as exc:  # transport: asked again at the next recheck
            return f"discovery of {group_version} failed: {type(exc).__name__}: {exc}"
        if status == 404:
            return f"{NOT_SERVED} {group_version} (is the operator's CRD installed?)"
        if status != 200:
            return f"discovery of {group_version}: HTTP {status}"
        try:
            names = {r.get("name") for r in json.loads(body).get("resources") or [] if isinstance(r, dict)}
        except (ValueError, AttributeError):
            return f"discovery of {group_version}: not an APIResourceList"
        return None if resource.plural in names else f"{NOT_SERVED} {resource.plural} in {group_version}"

    def _start(self, resource: Resource) -> None:
        informer = self._make(resource)
        with self._lock:
            if self._stopped.is_set():
                return
            self.informers[resource] = informer
        threading.Thread(target=informer.run, name=f"informer-{resource.plural}", daemon=True).start()


def path_of(resource: Resource) -> str:
    """The collection path of a root resource, across namespaces."""
    return f"/apis/{resource.group}/{resource.version}/{resource.plural}"
