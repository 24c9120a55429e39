"""The local cluster's scheduler: binds ungated pods addressed to its scheduler names.

Placement is ``cluster.scheduling`` (kube-scheduler's Filter plugins and LeastAllocated scoring, nominated pods
holding their room); unschedulable pods get the PodScheduled=False condition and a FailedScheduling event.

With ``preemption`` (the DefaultPreemption PostFilter plugin, ``cluster.preemption``; off unless asked for, as a
profile without PostFilter plugins has it) a pod that fits no node may preempt lower-priority pods, as
``prepareCandidate`` and ``handleSchedulingFailure`` do: each victim gets the ``DisruptionTarget`` condition
(``PreemptionByScheduler``) and is deleted with a plain DELETE (its own grace period), and a ``Preempted`` event
(events.k8s.io/v1, regarding the victim, related to the preemptor); lower-priority pods nominated to that node lose
their nomination; then the preemptor's PodScheduled=False condition and ``status.nominatedNodeName`` are written
together. The FailedScheduling message carries the PostFilter's ("... preemption: <why>."), except on success.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Mapping
from typing import Any

from cluster.admission import User
from cluster.apiserver import ApiServer
from cluster.controllers import Loop
from cluster.preemption import PREEMPTED_BY_SCHEDULER, Candidate, preempt
from cluster.scheduling import nominated_node, priority, schedule, unschedulable_message
from cluster.store import ApiError, Obj, micro_time, now

SCHEDULER = User("system:kube-scheduler", ("system:authenticated",))


def _pending(pod: Obj, names: frozenset[str]) -> bool:
    spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
    return (not spec.get("nodeName") and not spec.get("schedulingGates") and not meta.get("deletionTimestamp")
            and spec.get("schedulerName", "default-scheduler") in names
            and (pod.get("status") or {}).get("phase", "Pending") == "Pending")


def _path(pod: Mapping[str, Any]) -> str:
    return f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}"


def _reference(pod: Mapping[str, Any]) -> Obj:
    meta = pod["metadata"]
    return {"apiVersion": "v1", "kind": "Pod", "namespace": meta["namespace"], "name": meta["name"],
            "uid": meta["uid"], "resourceVersion": meta.get("resourceVersion", "")}


class Scheduler(Loop):
    def __init__(self, api: ApiServer, scheduler_names: tuple[str, ...] = ("default-scheduler",),
                 preemption: bool = False) -> None:
        super().__init__(api, SCHEDULER)
        self.names = frozenset(scheduler_names)
        self.preemption = preemption
        self._reported: dict[str, tuple[str, str]] = {}  # pod uid -> last (FailedScheduling message, nomination)

    def reconcile(self) -> None:
        pods_resource = self.api.registry.get("", "v1", "pods")
        nodes_resource = self.api.registry.get("", "v1", "nodes")
        pdbs_resource = self.api.registry.get("policy", "v1", "poddisruptionbudgets")
        assert pods_resource is not None and nodes_resource is not None and pdbs_resource is not None
        pods = self.store.items(pods_resource)
        nodes = self.store.items(nodes_resource)
        pending = sorted((p for p in pods if _pending(p, self.names)),
                         key=lambda p: (-priority(p), p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
        nominated = self._nominated(pods)
        for pod in pending:
            node, reasons = schedule(pod, nodes, pods, nominated)
            if node is None:
                outcome = preempt(pod, nodes, pods, reasons, self.store.items(pdbs_resource), nominated) \
                    if self.preemption else None
                nomination = nominated_node(pod)
                if outcome is not None and outcome.candidate is not None:
                    self._preempt(pod, outcome.candidate, nominated)
                    nomination = outcome.candidate.node
                elif outcome is not None and outcome.clear:
                    nomination = ""
                self._unschedulable(pod, unschedulable_message(reasons, len(nodes),
                                                               outcome.message if outcome else ""), nomination)
                pods = self.store.items(pods_resource)  # victims terminating, a nomination made
                nominated = self._nominated(pods)
                continue
            try:
                self.client.create(_path(pod) + "/binding", {"apiVersion": "v1", "kind": "Binding",
                                                             "metadata": {"name": pod["metadata"]["name"]},
                                                             "target": {"apiVersion": "v1", "kind": "Node",
                                                                        "name": node}})
            except ApiError:
                continue  # gone, or bound meanwhile: the next pass sees the new state
            pods = self.store.items(pods_resource)  # placement of the next pod counts this one
            nominated = self._nominated(pods)

    def _nominated(self, pods: list[Obj]) -> list[Obj]:
        """The nominator's pods: pending pods of this scheduler nominated to a node."""
        return [p for p in pods if _pending(p, self.names) and nominated_node(p)]

    def _preempt(self, preemptor: Obj, candidate: Candidate, nominated: list[Obj]) -> None:
        """``prepareCandidate``: the victims marked, deleted and told; lower-priority nominations on the node
        cleared."""
        scheduler = (preemptor.get("spec") or {}).get("schedulerName", "default-scheduler")
        for victim in candidate.victims:
            with contextlib.suppress(ApiError):  # gone meanwhile: nothing to preempt
                self.client.patch(_path(victim) + "/status", {"status": {"conditions": [
                    {"type": "DisruptionTarget", "status": "True", "reason": PREEMPTED_BY_SCHEDULER,
                     "message": f"{scheduler}: preempting to accommodate a higher priority pod",
                     "lastTransitionTime": now()}]}}, kind="strategic-merge")
                self.client.call("DELETE", _path(victim))
            with contextlib.suppress(ApiError):  # events are best effort
                self.client.create(f"/apis/events.k8s.io/v1/namespaces/{victim['metadata']['namespace']}/events", {
                    "metadata": {"name": f"{victim['metadata']['name']}.{time.time_ns():x}"},
                    "eventTime": micro_time(), "reportingController": scheduler,
                    "reportingInstance": f"{scheduler}-emulator", "action": "Preempting", "reason": "Preempted",
                    "type": "Normal", "regarding": _reference(victim), "related": _reference(preemptor),
                    "note": f"Preempted by pod {preemptor['metadata']['uid']} on node {candidate.node}"})
        for other in nominated:
            if nominated_node(other) == candidate.node and priority(other) < priority(preemptor):
                with contextlib.suppress(ApiError):
                    self.client.patch(_path(other) + "/status", {"status": {"nominatedNodeName": None}})
                    self._reported.pop(other["metadata"]["uid"], None)

    def _unschedulable(self, pod: Obj, message: str, nomination: str) -> None:
        """``handleSchedulingFailure``: the FailedScheduling event and, in one status patch, PodScheduled=False with
        the message and the nomination (once per change)."""
        uid = pod["metadata"]["uid"]
        if self._reported.get(uid) == (message, nomination):
            return
        event = self._reported.get(uid, ("", ""))[0] != message
        self._reported[uid] = (message, nomination)
        try:
            self.client.patch(_path(pod) + "/status", {"status": {
                "nominatedNodeName": nomination or None, "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                     "lastTransitionTime": now()}]}}, kind="strategic-merge")
            if event:
                self.client.create(f"/api/v1/namespaces/{pod['metadata']['namespace']}/events", {
                    "metadata": {"name": f"{pod['metadata']['name']}.{uuid.uuid4().hex[:16]}"},  # as the scheduler
                    "involvedObject": {"kind": "Pod", "namespace": pod["metadata"]["namespace"],
                                       "name": pod["metadata"]["name"], "uid": uid, "apiVersion": "v1"},
                    "reason": "FailedScheduling", "message": message, "type": "Warning",
                    "source": {"component": "default-scheduler"}, "firstTimestamp": now(), "lastTimestamp": now(),
                    "count": 1})
        except ApiError:
            pass
