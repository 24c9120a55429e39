"""The local cluster's kubelets, one per node, run by one loop: heartbeats, pod admission, start, completion and
the end of deleted pods. Containers are not run: a started pod is Running and Ready, and stops at once.

- **Heartbeat.** Each kubelet renews its node's Lease (``kube-node-lease/<node>``, owned by the Node) every
  ``lease_renew_seconds`` (the real kubelet: every 10 s, a quarter of the 40 s lease) and posts the node's Ready
  condition when it differs from what it knows (True, or False with ``KubeletNotReady`` while its runtime is
  down), e.g. after the node lifecycle controller marked the node Unknown (``cluster/nodes.py``).
- **Admission** (``kubelet/lifecycle/predicate.go``): a pod bound to the node is checked, in creation order,
  against the pods the kubelet already admitted there that have not finished: ``noderesources.Fits`` (pod count,
  cpu, memory, ephemeral-storage, extended resources the node has), required node affinity/selector, node name,
  host ports, then NoExecute taints. The first failure rejects it: phase Failed, reason ``OutOfcpu`` (…
  ``OutOfpods``, ``OutOf<extended resource>``, or the predicate's name), message ``Pod was rejected: Node didn't
  have enough resource: cpu, requested: 3000, used: 6000, capacity: 8000`` (millicores for cpu, bytes for memory)
  or ``Pod was rejected: Predicate NodePorts failed: …``, and a Warning event with that reason. This happens only
  when something binds beyond what the scheduler would (a direct Binding, a second scheduler).
- **Start and completion:** an admitted pod runs after ``start_seconds``; with ``run_seconds`` it then succeeds.
  A Running pod whose Ready condition was set False (the node lifecycle controller) is reported Ready again.
- **Deletion:** a pod marked for deletion keeps running while its containers stop, ``stop_seconds`` (at most its
  grace period), then is Failed (unless it had finished) and the kubelet confirms with a DELETE of grace period 0
  and the pod's uid as precondition; finalizers still hold it. Controllers thus see a Running pod with a
  ``deletionTimestamp`` for a while, as in a real cluster where containers take time to shut down.
- ``stop(node)``/``start(node)``: a stopped kubelet does nothing for its node: no heartbeat, no status, no
  admissions or starts, no confirmations of deletions (its pods stay Terminating), as when the node is down.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from cluster.admission import User
from cluster.apiserver import ApiServer
from cluster.controllers import Client, Loop
from cluster.scheduling import (
    REASON_NODE_AFFINITY,
    REASON_NODE_NAME,
    REASON_NODE_PORTS,
    host_ports_free,
    insufficient_resources,
    matches_node_selector_and_affinity,
    node_name_matches,
    node_usage,
    untolerated_taint,
)
from cluster.store import ApiError, Obj, micro_time, now
from cluster.validation.resources import is_extended

NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
TAINT_REASON_NOT_MATCH = "node(s) had taints that the pod didn't tolerate"
_OUT_OF = {"cpu": "OutOfcpu", "memory": "OutOfmemory", "ephemeral-storage": "OutOfephemeral-storage",
           "pods": "OutOfpods"}
_TERMINAL = ("Succeeded", "Failed")
# What a healthy kubelet reports for its other node conditions (the node lifecycle controller sets them Unknown).
_NO_PRESSURE = {"MemoryPressure": ("False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                "DiskPressure": ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                "PIDPressure": ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available")}


def node_user(node: str) -> User:
    return User(f"system:node:{node}", ("system:nodes", "system:authenticated"))


def _without_missing_extended(pod: Obj, node: Obj) -> Obj:
    """removeMissingExtendedResources: requests of extended resources the node does not have at all are dropped
    (cluster-level resources unknown to nodes)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    spec = dict(pod.get("spec") or {})
    for key in ("containers", "initContainers"):
        containers = []
        for container in spec.get(key) or []:
            resources = {part: {k: v for k, v in (values or {}).items() if not is_extended(k) or k in allocatable}
                         for part, values in (container.get("resources") or {}).items()}  # limits default requests
            containers.append({**container, "resources": resources})
        spec[key] = containers
    return {**pod, "spec": spec}


def admission_failure(pod: Obj, node: Obj, admitted: list[Obj]) -> tuple[str, str] | None:
    """The kubelet's predicateAdmitHandler: (reason, message) of the first failure, or None when admitted."""
    checked = _without_missing_extended(pod, node)
    for short in insufficient_resources(checked, node, node_usage(admitted)):
        message = (f"Node didn't have enough resource: {short.resource}, requested: {short.requested}, "
                   f"used: {short.used}, capacity: {short.capacity}")
        return _OUT_OF.get(short.resource, f"OutOf{short.resource}"), message
    for name, failed in (("NodeAffinity", matches_node_selector_and_affinity(pod, node) == REASON_NODE_AFFINITY),
                         ("NodeName", node_name_matches(pod, node) == REASON_NODE_NAME),
                         ("NodePorts", host_ports_free(pod, node, admitted) == REASON_NODE_PORTS)):
        if failed:
            reason = {"NodeAffinity": REASON_NODE_AFFINITY, "NodeName": REASON_NODE_NAME,
                      "NodePorts": REASON_NODE_PORTS}[name]
            return name, f"Predicate {name} failed: {reason}"
    if untolerated_taint(pod, node, ("NoExecute",)) is not None:
        return "TaintToleration", f"Predicate TaintToleration failed: {TAINT_REASON_NOT_MATCH}"
    return None


class Kubelet(Loop):
    period = 0.05
    coalesce = 0.1

    def __init__(self, api: ApiServer, start_seconds: float = 0.1, run_seconds: float | None = None,
                 lease_renew_seconds: float = 10.0, stop_seconds: float = 0.5) -> None:
        super().__init__(api, node_user("local"))
        self.start_seconds, self.run_seconds, self.stop_seconds = start_seconds, run_seconds, stop_seconds
        self.lease_renew_seconds = lease_renew_seconds
        self._lock = threading.Lock()
        self._down: set[str] = set()  # nodes whose kubelet is stopped
        self._runtime_down: set[str] = set()  # nodes whose kubelet reports NotReady
        self._clients: dict[str, Client] = {}
        self._admitted: dict[str, float] = {}  # pod uid -> when admitted
        self._running_at: dict[str, float] = {}
        self._stopping_at: dict[str, float] = {}  # pod uid -> when its deletion was first seen
        self._renewed: dict[str, float] = {}  # node -> last lease renewal

    # --- faults ------------------------------------------------------------------------

    def stop_node(self, node: str) -> None:
        with self._lock:
            self._down.add(node)

    def start_node(self, node: str) -> None:
        with self._lock:
            self._down.discard(node)
            self._renewed.pop(node, None)  # the first heartbeat goes out at once

    def set_runtime_ready(self, node: str, ready: bool) -> None:
        with self._lock:
            (self._runtime_down.discard if ready else self._runtime_down.add)(node)

    # --- the loop ----------------------------------------------------------------------

    def _client(self, node: str) -> Client:
        if node not in self._clients:
            self._clients[node] = Client(self.api, node_user(node))
        return self._clients[node]

    def reconcile(self) -> None:
        pods_resource = self.api.registry.get("", "v1", "pods")
        nodes_resource = self.api.registry.get("", "v1", "nodes")
        assert pods_resource is not None and nodes_resource is not None
        with self._lock:
            down, runtime_down = set(self._down), set(self._runtime_down)
        nodes = {n["metadata"]["name"]: n for n in self.store.items(nodes_resource)}
        pods = self.store.items(pods_resource)
        present = {p["metadata"]["uid"] for p in pods}
        for known in (self._admitted, self._running_at, self._stopping_at):
            for uid in [u for u in known if u not in present]:
                del known[uid]
        by_node: dict[str, list[Obj]] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if isinstance(node, str) and node in nodes and node not in down:
                by_node.setdefault(node, []).append(pod)
        for name, node in nodes.items():
            if name not in down:
                self._heartbeat(node, name in runtime_down)
                self._sync_pods(node, by_node.get(name, []), name in runtime_down)

    def _heartbeat(self, node: Obj, runtime_down: bool) -> None:
        name, clock = node["metadata"]["name"], time.monotonic()
        client = self._client(name)
        if clock - self._renewed.get(name, -self.lease_renew_seconds) >= self.lease_renew_seconds:
            self._renewed[name] = clock
            path = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases"
            try:
                client.patch(f"{path}/{name}", {"spec": {"renewTime": micro_time()}})
            except ApiError as exc:
                if exc.code == 404:
                    with contextlib.suppress(ApiError):
                        client.create(path, {"metadata": {"name": name, "ownerReferences": [
                            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}]},
                            "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                                     "renewTime": micro_time()}})
        ready = (("False", "KubeletNotReady", "container runtime is down") if runtime_down
                 else ("True", "KubeletReady", "kubelet is posting ready status"))
        changed = []
        for condition in (node.get("status") or {}).get("conditions") or [{"type": "Ready"}]:
            status, reason, message = ready if condition.get("type") == "Ready" else _NO_PRESSURE.get(
                condition.get("type", ""), (condition.get("status"), condition.get("reason"), condition.get("message")))
            if (condition.get("status"), condition.get("reason")) != (status, reason):
                changed.append({"type": condition["type"], "status": status, "reason": reason, "message": message,
                                "lastHeartbeatTime": now(), "lastTransitionTime": now()})
        if changed:
            with contextlib.suppress(ApiError):
                client.patch(f"/api/v1/nodes/{name}/status", {"status": {"conditions": changed}},
                             kind="strategic-merge")

    def _sync_pods(self, node: Obj, pods: list[Obj], runtime_down: bool) -> None:
        client, clock = self._client(node["metadata"]["name"]), time.monotonic()
        admitted = [p for p in pods if p["metadata"]["uid"] in self._admitted and _phase(p) not in _TERMINAL]
        admitted += [p for p in pods if _phase(p) == "Running" and p["metadata"]["uid"] not in self._admitted]
        for pod in sorted(pods, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"])):
            meta, phase = pod["metadata"], _phase(pod)
            uid = meta["uid"]
            if meta.get("deletionTimestamp"):
                stopping = clock - self._stopping_at.setdefault(uid, clock)
                if phase in _TERMINAL or stopping >= min(self.stop_seconds,
                                                         meta.get("deletionGracePeriodSeconds") or 0):
                    self._terminate(client, pod)
                continue
            if phase in _TERMINAL:
                continue
            if uid not in self._admitted and phase == "Pending":
                if runtime_down:
                    continue
                refused = admission_failure(pod, node, [p for p in admitted if p["metadata"]["uid"] != uid])
                if refused is not None:
                    self._reject(client, pod, *refused)
                    continue
                admitted.append(pod)
            self._admitted.setdefault(uid, clock)
            if phase == "Pending" and clock - self._admitted[uid] >= self.start_seconds and not runtime_down:
                self._status(client, pod, "Running", ready=True)
                self._running_at[uid] = clock
            elif phase == "Running" and self.run_seconds is not None \
                    and clock - self._running_at.setdefault(uid, clock) >= self.run_seconds:
                self._status(client, pod, "Succeeded", ready=False)
            elif phase == "Running" and not _ready(pod) and not runtime_down:
                self._status(client, pod, "Running", ready=True)

    def _terminate(self, client: Client, pod: Obj) -> None:
        meta = pod["metadata"]
        if _phase(pod) not in _TERMINAL:
            self._status(client, pod, "Failed", ready=False)
        self._admitted.pop(meta["uid"], None)
        self._running_at.pop(meta["uid"], None)
        with contextlib.suppress(ApiError):  # gone already, or another pod of that name
            client.call("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                        {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})

    def _reject(self, client: Client, pod: Obj, reason: str, message: str) -> None:
        meta = pod["metadata"]
        base = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        with contextlib.suppress(ApiError):
            client.patch(base + "/status", {"status": {"phase": "Failed", "reason": reason,
                                                       "message": f"Pod was rejected: {message}"}},
                         kind="strategic-merge")
            client.create(f"/api/v1/namespaces/{meta['namespace']}/events", {
                "metadata": {"name": f"{meta['name']}.{time.time_ns():x}"},
                "involvedObject": {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"],
                                   "uid": meta["uid"], "apiVersion": "v1"},
                "reason": reason, "message": message, "type": "Warning",
                "source": {"component": "kubelet", "host": pod["spec"]["nodeName"]},
                "firstTimestamp": now(), "lastTimestamp": now(), "count": 1})

    def _status(self, client: Client, pod: Obj, phase: str, ready: bool) -> None:
        meta = pod["metadata"]
        containers = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
        state: dict[str, Any] = {"running": {"startedAt": now()}} if phase == "Running" else {
            "terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now()} if phase == "Succeeded"
            else {"exitCode": 137, "reason": "Error", "finishedAt": now()}}
        status = {"phase": phase, "startTime": (pod.get("status") or {}).get("startTime") or now(),
                  "conditions": [{"type": t, "status": "True" if ready else "False", "lastTransitionTime": now()}
                                 for t in ("Initialized", "Ready", "ContainersReady")],
                  "containerStatuses": [{"name": name, "ready": ready, "restartCount": 0, "state": state,
                                         "image": "", "imageID": ""} for name in containers]}
        with contextlib.suppress(ApiError):  # the pod is gone: nothing to report
            client.patch(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                         {"status": status}, kind="strategic-merge")


def _phase(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase", "Pending")


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])
