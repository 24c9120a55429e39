"""kube-controller-manager's pod garbage collector, the part that ends pods nobody else can end
(``pkg/controller/podgc/gc_controller.go``: ``gcUnscheduledTerminating``): every ``gcCheckPeriod`` (20 s), a pod
being deleted that was never bound to a node (no kubelet will ever stop it) is marked Failed, unless it already
finished, and deleted with grace period 0 (``markFailedAndDeletePod``); its finalizers still hold it, so a Job that
only replaces failed pods (``cluster/operators/job.py``) sees it fail. Deleting terminated pods above the threshold
and orphaned pods of deleted nodes is not emulated.
"""

from __future__ import annotations

import contextlib

from cluster.apiserver import ApiServer
from cluster.controllers import Loop
from cluster.operators.base import service_account
from cluster.store import ApiError

GC_CHECK_PERIOD = 20.0


class PodGC(Loop):
    on_change = False

    def __init__(self, api: ApiServer, period: float = GC_CHECK_PERIOD) -> None:
        super().__init__(api, service_account("kube-system", "pod-garbage-collector"))
        self.period = period

    def reconcile(self) -> None:
        pods = self.api.registry.get("", "v1", "pods")
        assert pods is not None
        for pod in self.store.items(pods):
            meta = pod["metadata"]
            if not meta.get("deletionTimestamp") or (pod.get("spec") or {}).get("nodeName"):
                continue
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            with contextlib.suppress(ApiError):  # gone meanwhile
                if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    self.client.patch(path + "/status", {"status": {"phase": "Failed"}})
                self.client.call("DELETE", path, {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})
