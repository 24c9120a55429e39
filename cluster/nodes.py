"""kube-controller-manager's node lifecycle controller and taint eviction controller.

Node lifecycle (``pkg/controller/nodelifecycle``): a node whose kubelet has not renewed its Lease for
``grace_seconds`` (``--node-monitor-grace-period``, 40 s in 1.31, 50 s from 1.32) gets its Ready condition set to
Unknown (``NodeStatusUnknown``, "Kubelet stopped posting node status."). Taints follow the conditions
(``doNoScheduleTaintingPass``/``doNoExecuteTaintingPass``): Ready Unknown -> ``node.kubernetes.io/unreachable``
NoSchedule and NoExecute, Ready False -> ``node.kubernetes.io/not-ready`` NoSchedule and NoExecute (NoExecute
taints carry ``timeAdded``), ``spec.unschedulable`` -> ``node.kubernetes.io/unschedulable`` NoSchedule; they go
when the condition clears. When Ready stops being True the node's pods are marked not Ready (``MarkPodsNotReady``,
event ``NodeNotReady``).

Taint eviction (``pkg/controller/tainteviction``): a pod on a node with NoExecute taints is evicted at once when a
taint has no matching toleration, else after the smallest ``tolerationSeconds`` of the tolerations used (none:
never): condition DisruptionTarget (``DeletionByTaintManager``) added, then deleted with its grace period. Pods
normally carry the 300 s tolerations of the DefaultTolerationSeconds admission plugin (``cluster/defaults.py``).
A pod evicted from a node whose kubelet is down stays Terminating until that kubelet confirms (or a force delete).
"""

from __future__ import annotations

import contextlib
import time

from cluster.apiserver import ApiServer
from cluster.controllers import Loop
from cluster.kubelet import NODE_LEASE_NAMESPACE
from cluster.operators.base import service_account
from cluster.scheduling import tolerates
from cluster.store import ApiError, Obj, now

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
_MANAGED = (NOT_READY, UNREACHABLE, UNSCHEDULABLE)


def _ready_status(node: Obj) -> str:
    conditions = (node.get("status") or {}).get("conditions") or []
    return next((c.get("status", "Unknown") for c in conditions if c.get("type") == "Ready"), "Unknown")


def condition_taints(node: Obj) -> list[Obj]:
    """The taints the controller keeps on ``node`` for its conditions and ``spec.unschedulable``."""
    status, wanted = _ready_status(node), []
    key = {"False": NOT_READY, "Unknown": UNREACHABLE}.get(status)
    if key:
        wanted += [{"key": key, "effect": "NoSchedule"}, {"key": key, "effect": "NoExecute"}]
    if (node.get("spec") or {}).get("unschedulable"):
        wanted.append({"key": UNSCHEDULABLE, "effect": "NoSchedule"})
    return wanted


class NodeLifecycleController(Loop):
    period = 0.25
    coalesce = 0.2

    def __init__(self, api: ApiServer, grace_seconds: float = 40.0) -> None:
        super().__init__(api, service_account("kube-system", "node-controller"))
        self.grace_seconds = grace_seconds
        self._probed: dict[str, tuple[str, float]] = {}  # node -> (lease renewTime, when we saw it change)
        self._observed: dict[str, str] = {}  # node -> Ready status at the last pass

    def reconcile(self) -> None:
        nodes_resource = self.api.registry.get("", "v1", "nodes")
        leases_resource = self.api.registry.get("coordination.k8s.io", "v1", "leases")
        pods_resource = self.api.registry.get("", "v1", "pods")
        assert nodes_resource and leases_resource and pods_resource
        leases = {lease["metadata"]["name"]: lease for lease in self.store.items(leases_resource)
                  if lease["metadata"].get("namespace") == NODE_LEASE_NAMESPACE}
        clock = time.monotonic()
        for node in self.store.items(nodes_resource):
            name = node["metadata"]["name"]
            renewed = ((leases.get(name) or {}).get("spec") or {}).get("renewTime", "")
            if self._probed.get(name, ("", 0.0))[0] != renewed or name not in self._probed:
                self._probed[name] = (renewed, clock)
            if clock - self._probed[name][1] > self.grace_seconds and _ready_status(node) != "Unknown":
                node = self._mark_unknown(node)
            self._taint(node)
            status, before = _ready_status(node), self._observed.get(name, "True")
            self._observed[name] = status
            if status != "True" and before == "True":
                self._event(node)
                self._mark_pods_not_ready(name, self.store.items(pods_resource))

    def _mark_unknown(self, node: Obj) -> Obj:
        conditions = []
        for condition in (node.get("status") or {}).get("conditions") or []:
            if condition.get("status") != "Unknown":
                condition = {**condition, "status": "Unknown", "reason": "NodeStatusUnknown",
                             "message": "Kubelet stopped posting node status.", "lastTransitionTime": now()}
            conditions.append(condition)
        with contextlib.suppress(ApiError):
            return self.client.patch(f"/api/v1/nodes/{node['metadata']['name']}/status",
                                     {"status": {"conditions": conditions}})
        return node

    def _taint(self, node: Obj) -> None:
        current = (node.get("spec") or {}).get("taints") or []
        kept = [t for t in current if t.get("key") not in _MANAGED]
        wanted = []
        for taint in condition_taints(node):
            same = next((t for t in current if (t.get("key"), t.get("effect")) == (taint["key"], taint["effect"])),
                        None)
            wanted.append(same or ({**taint, "timeAdded": now()} if taint["effect"] == "NoExecute" else taint))
        if kept + wanted != current:
            with contextlib.suppress(ApiError):
                self.client.patch(f"/api/v1/nodes/{node['metadata']['name']}", {"spec": {"taints": kept + wanted}})

    def _event(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        with contextlib.suppress(ApiError):
            self.client.create("/api/v1/namespaces/default/events", {
                "metadata": {"name": f"{name}.{time.time_ns():x}"},
                "involvedObject": {"kind": "Node", "name": name, "uid": name, "apiVersion": "v1"},
                "reason": "NodeNotReady", "message": f"Node {name} status is now: NodeNotReady", "type": "Normal",
                "source": {"component": "node-controller"}, "firstTimestamp": now(), "lastTimestamp": now(),
                "count": 1})

    def _mark_pods_not_ready(self, node: str, pods: list[Obj]) -> None:
        for pod in pods:
            meta = pod["metadata"]
            if (pod.get("spec") or {}).get("nodeName") != node:
                continue
            conditions = (pod.get("status") or {}).get("conditions") or []
            if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                continue
            base = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            with contextlib.suppress(ApiError):
                self.client.patch(base + "/status", {"status": {"conditions": [
                    {"type": "Ready", "status": "False", "lastTransitionTime": now()}]}}, kind="strategic-merge")
                self.client.create(f"/api/v1/namespaces/{meta['namespace']}/events", {
                    "metadata": {"name": f"{meta['name']}.{time.time_ns():x}"},
                    "involvedObject": {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"],
                                       "uid": meta["uid"], "apiVersion": "v1"},
                    "reason": "NodeNotReady", "message": "Node is not ready", "type": "Warning",
                    "source": {"component": "node-controller"}, "firstTimestamp": now(), "lastTimestamp": now(),
                    "count": 1})


def eviction_delay(pod: Obj, taints: list[Obj]) -> float | None:
    """Seconds a pod may stay on a node with these NoExecute taints: 0 if one is not tolerated, else the smallest
    tolerationSeconds of the tolerations used (negative counts as 0); None: tolerated for ever."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    used = []
    for taint in taints:
        matching = [t for t in tolerations if tolerates(t, taint)]
        if not matching:
            return 0.0
        used += matching
    seconds = [max(0.0, float(t["tolerationSeconds"])) for t in used if t.get("tolerationSeconds") is not None]
    return min(seconds) if seconds else None


class TaintEvictionController(Loop):
    period = 0.25
    coalesce = 0.2

    def __init__(self, api: ApiServer) -> None:
        super().__init__(api, service_account("kube-system", "node-controller"))
        self._since: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}  # (pod uid, taints) -> first seen

    def reconcile(self) -> None:
        nodes_resource = self.api.registry.get("", "v1", "nodes")
        pods_resource = self.api.registry.get("", "v1", "pods")
        assert nodes_resource and pods_resource
        no_execute = {n["metadata"]["name"]: [t for t in (n.get("spec") or {}).get("taints") or []
                                              if t.get("effect") == "NoExecute"]
                      for n in self.store.items(nodes_resource)}
        clock, seen = time.monotonic(), set()
        for pod in self.store.items(pods_resource):
            taints = no_execute.get((pod.get("spec") or {}).get("nodeName") or "")
            if not taints or pod["metadata"].get("deletionTimestamp"):
                continue
            key = (pod["metadata"]["uid"], frozenset((t.get("key", ""), t.get("value", "")) for t in taints))
            seen.add(key)
            since = self._since.setdefault(key, clock)
            delay = eviction_delay(pod, taints)
            if delay is not None and clock - since >= delay:
                self._evict(pod)
        for key in [k for k in self._since if k not in seen]:
            del self._since[key]

    def _evict(self, pod: Obj) -> None:
        meta = pod["metadata"]
        base = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        with contextlib.suppress(ApiError):
            self.client.patch(base + "/status", {"status": {"conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                 "message": "Taint manager: deleting due to NoExecute taint", "lastTransitionTime": now()}]}},
                kind="strategic-merge")
            self.client.call("DELETE", base, {"preconditions": {"uid": meta["uid"]}})
