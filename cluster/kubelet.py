"""The local cluster's kubelet: bound pods start after a delay, may complete, and go away when deleted."""

from __future__ import annotations

import contextlib
import time

from cluster.admission import User
from cluster.apiserver import ApiServer
from cluster.controllers import Loop
from cluster.store import ApiError, Obj, now

KUBELET = User("system:node:local", ("system:nodes", "system:authenticated"))


class Kubelet(Loop):
    period = 0.05
    coalesce = 0.1

    def __init__(self, api: ApiServer, start_seconds: float = 0.1, run_seconds: float | None = None) -> None:
        super().__init__(api, KUBELET)
        self.start_seconds, self.run_seconds = start_seconds, run_seconds
        self._bound_at: dict[str, float] = {}
        self._running_at: dict[str, float] = {}

    def reconcile(self) -> None:
        pods_resource = self.api.registry.get("", "v1", "pods")
        assert pods_resource is not None
        clock = time.monotonic()
        for pod in self.store.items(pods_resource):
            meta, spec = pod["metadata"], pod.get("spec") or {}
            if not spec.get("nodeName"):
                continue
            uid = meta["uid"]
            if meta.get("deletionTimestamp"):
                self.store.remove(pods_resource, meta["namespace"], meta["name"])
                continue
            phase = (pod.get("status") or {}).get("phase", "Pending")
            self._bound_at.setdefault(uid, clock)
            if phase == "Pending" and clock - self._bound_at[uid] >= self.start_seconds:
                self._status(pod, "Running", ready=True)
                self._running_at[uid] = clock
            elif (phase == "Running" and self.run_seconds is not None
                  and clock - self._running_at.get(uid, clock) >= self.run_seconds):
                self._status(pod, "Succeeded", ready=False)

    def _status(self, pod: Obj, phase: str, ready: bool) -> None:
        meta = pod["metadata"]
        containers = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
        state = {"running": {"startedAt": now()}} if phase == "Running" else {
            "terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now()}}
        status = {"phase": phase, "startTime": (pod.get("status") or {}).get("startTime") or now(),
                  "conditions": [{"type": t, "status": "True" if ready else "False", "lastTransitionTime": now()}
                                 for t in ("Initialized", "Ready", "ContainersReady")],
                  "containerStatuses": [{"name": name, "ready": ready, "restartCount": 0, "state": state,
                                         "image": "", "imageID": ""} for name in containers]}
        with contextlib.suppress(ApiError):  # the pod is gone: nothing to report
            self.client.patch(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                              {"status": status}, kind="strategic-merge")
