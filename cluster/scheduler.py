"""The local cluster's scheduler: binds ungated pods addressed to its scheduler names.

Placement is ``cluster.scheduling`` (kube-scheduler's Filter plugins and LeastAllocated
scoring); unschedulable pods get the PodScheduled=False condition and a FailedScheduling event.
"""

from __future__ import annotations

import uuid

from cluster.admission import User
from cluster.apiserver import ApiServer
from cluster.controllers import Loop
from cluster.scheduling import schedule, unschedulable_message
from cluster.store import ApiError, Obj, now

SCHEDULER = User("system:kube-scheduler", ("system:authenticated",))


def _pending(pod: Obj, names: frozenset[str]) -> bool:
    spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
    return (not spec.get("nodeName") and not spec.get("schedulingGates") and not meta.get("deletionTimestamp")
            and spec.get("schedulerName", "default-scheduler") in names
            and (pod.get("status") or {}).get("phase", "Pending") == "Pending")


class Scheduler(Loop):
    def __init__(self, api: ApiServer, scheduler_names: tuple[str, ...] = ("default-scheduler",)) -> None:
        super().__init__(api, SCHEDULER)
        self.names = frozenset(scheduler_names)
        self._reported: dict[str, str] = {}  # pod uid -> last FailedScheduling message

    def reconcile(self) -> None:
        pods_resource = self.api.registry.get("", "v1", "pods")
        nodes_resource = self.api.registry.get("", "v1", "nodes")
        assert pods_resource is not None and nodes_resource is not None
        pods = self.store.items(pods_resource)
        nodes = self.store.items(nodes_resource)
        pending = sorted((p for p in pods if _pending(p, self.names)),
                         key=lambda p: (-((p.get("spec") or {}).get("priority") or 0),
                                        p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
        for pod in pending:
            node, reasons = schedule(pod, nodes, pods)
            meta = pod["metadata"]
            base = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            if node is None:
                self._unschedulable(pod, base, unschedulable_message(reasons, len(nodes)))
                continue
            try:
                self.client.create(base + "/binding", {"apiVersion": "v1", "kind": "Binding",
                                                       "metadata": {"name": meta["name"]},
                                                       "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
            except ApiError:
                continue  # gone, or bound meanwhile: the next pass sees the new state
            pods = self.store.items(pods_resource)  # placement of the next pod counts this one

    def _unschedulable(self, pod: Obj, base: str, message: str) -> None:
        uid = pod["metadata"]["uid"]
        if self._reported.get(uid) == message:
            return
        self._reported[uid] = message
        try:
            self.client.patch(base + "/status", {"status": {"conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                 "lastTransitionTime": now()}]}}, kind="strategic-merge")
            self.client.create(f"/api/v1/namespaces/{pod['metadata']['namespace']}/events", {
                "metadata": {"name": f"{pod['metadata']['name']}.{uuid.uuid4().hex[:16]}"},  # as the scheduler
                "involvedObject": {"kind": "Pod", "namespace": pod["metadata"]["namespace"],
                                   "name": pod["metadata"]["name"], "uid": uid, "apiVersion": "v1"},
                "reason": "FailedScheduling", "message": message, "type": "Warning",
                "source": {"component": "default-scheduler"}, "firstTimestamp": now(), "lastTimestamp": now(),
                "count": 1})
        except ApiError:
            pass
