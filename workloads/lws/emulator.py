"""LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): the LWS controller, its pod controller and pod webhook.

The LWS controller creates the leader StatefulSet ``<lws>`` (one leader pod ``<lws>-<group>`` per
replica, via the StatefulSet controller). For each leader the pod controller creates the worker
StatefulSet ``<lws>-<group>`` owned by the leader *pod* (size-1 workers ``<lws>-<group>-<1..>``);
under ``startupPolicy: LeaderReady`` only once the leader is Ready.

LWS's mutating pod webhook (group-index and group-unique-key on leaders, worker-index on workers)
cannot run inside the emulator's admission chain, so the pod controller applies the same labels
right after creation: other webhooks see the pod without them at CREATE, as they do in a real
cluster where LWS's webhook is called after theirs.

Restarts (the pod controller's ``handleRestartPolicy``): under ``leaderWorkerTemplate.restartPolicy``
RecreateGroupOnPodRestart (the default), a pod of the group seen with a ``deletionTimestamp`` (or a restarted
container) makes the controller delete the group's leader pod in the foreground, event
RecreateGroupOnPodRestart: the garbage collector removes the worker StatefulSet and its pods, the leader
StatefulSet creates the leader again, and the group starts over. A pod deleted before it was bound is gone at
once and never seen terminating: only its StatefulSet recreates it. Under ``None`` the StatefulSets recreate
single pods (and, as every StatefulSet, delete and recreate pods that Failed).
"""

from __future__ import annotations

import hashlib

from cluster.operators.base import PODS, STATEFULSETS, Operator, alive, labels, owner_ref, pod_ready, stable_hash, url
from cluster.store import Obj

LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
P = "leaderworkerset.sigs.k8s.io"
IDENTITY = ("lws-system", "lws-controller-manager")


def _template(template: Obj, extra_labels: dict[str, str], annotations: dict[str, str]) -> Obj:
    meta = dict(template.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), **extra_labels}
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    return {"metadata": meta, "spec": template.get("spec") or {}}


def _statefulset(name: str, owner: Obj, replicas: int, template: Obj, selector: dict[str, str],
                 sts_labels: dict[str, str], service: str, start: int = 0) -> Obj:
    spec: Obj = {"replicas": replicas, "serviceName": service, "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": selector}, "template": template}
    if start:
        spec["ordinals"] = {"start": start}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "labels": sts_labels, "ownerReferences": [owner_ref(owner)]}, "spec": spec}


class LeaderWorkerSetController(Operator):
    root = LWS
    identity = IDENTITY

    def sync(self, lws: Obj) -> None:
        spec, name = lws.get("spec") or {}, lws["metadata"]["name"]
        lwt = spec.get("leaderWorkerTemplate") or {}
        revision = stable_hash(lwt)
        replicas = spec.get("replicas", 1)
        sts = self.get(STATEFULSETS, lws["metadata"]["namespace"], name)
        if sts is None:
            template = _template(lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {},
                                 {f"{P}/worker-index": "0", f"{P}/name": name, f"{P}/template-revision-hash": revision},
                                 {f"{P}/size": str(lwt.get("size", 1))})
            self.create(STATEFULSETS, lws, _statefulset(
                name, lws, replicas, template, {f"{P}/name": name, f"{P}/worker-index": "0"},
                {f"{P}/name": name, f"{P}/template-revision-hash": revision}, name))
        elif (sts.get("spec") or {}).get("replicas") != replicas:
            self.client.patch(url(STATEFULSETS, lws["metadata"]["namespace"], name), {"spec": {"replicas": replicas}})
        leaders = [p for p in self.items(PODS, lws["metadata"]["namespace"])
                   if labels(p).get(f"{P}/name") == name and labels(p).get(f"{P}/worker-index") == "0"]
        self.patch_status(LWS, lws, {"replicas": len(leaders), "readyReplicas": sum(pod_ready(p) for p in leaders)})


class LeaderPodController(Operator):
    """pod_controller.go plus the pod webhook's labels; reconciles every pod of an LWS."""

    root = PODS
    identity = IDENTITY

    def roots(self) -> list[Obj]:
        return [p for p in self.items(PODS) if f"{P}/name" in labels(p)]

    def sync(self, pod: Obj) -> None:
        meta = pod["metadata"]
        lws = self.get(LWS, meta["namespace"], labels(pod)[f"{P}/name"])
        if not alive(pod) or _container_restarted(pod):
            if lws is not None:
                self._restart_group(pod, lws)
            return
        current = labels(pod)
        leader = current.get(f"{P}/worker-index") == "0"  # podutils.LeaderPod: set by the leader template
        ordinal = meta["name"].rsplit("-", 1)[-1]
        wanted = ({f"{P}/group-index": ordinal,
                   f"{P}/group-key": hashlib.sha1(f"{meta['namespace']}/{meta['name']}".encode()).hexdigest()}
                  if leader else {f"{P}/worker-index": ordinal})
        missing = {k: v for k, v in wanted.items() if k not in current}
        if missing:
            self.patch_labels(PODS, pod, missing)
            current = {**current, **missing}
        if not leader or lws is None:
            return
        spec = lws.get("spec") or {}
        lwt = spec.get("leaderWorkerTemplate") or {}
        size = lwt.get("size", 1)
        if size <= 1 or (spec.get("startupPolicy") == "LeaderReady" and not pod_ready(pod)):
            return
        if self.get(STATEFULSETS, meta["namespace"], meta["name"]) is None:
            group = {f"{P}/group-index": current[f"{P}/group-index"], f"{P}/name": current[f"{P}/name"],
                     f"{P}/group-key": current[f"{P}/group-key"]}
            sts_labels = {**group, f"{P}/template-revision-hash": current.get(f"{P}/template-revision-hash", "")}
            template = _template(lwt.get("workerTemplate") or {}, sts_labels,
                                 {f"{P}/size": str(size), f"{P}/leader-name": meta["name"]})
            self.create(STATEFULSETS, pod, _statefulset(meta["name"], pod, size - 1, template, group, sts_labels,
                                                        lws["metadata"]["name"], start=1))

    def _restart_group(self, pod: Obj, lws: Obj) -> None:
        """``handleRestartPolicy``: delete the group's leader (foreground) so that the whole group is recreated."""
        policy = ((lws.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("restartPolicy",
                                                                                  "RecreateGroupOnPodRestart")
        if policy != "RecreateGroupOnPodRestart":
            return
        meta = pod["metadata"]
        if labels(pod).get(f"{P}/worker-index") == "0":
            leader: Obj | None = pod
        else:
            leader = self.get(PODS, meta["namespace"], meta["name"].rsplit("-", 1)[0])
            if leader is None or labels(leader).get(f"{P}/template-revision-hash") != labels(pod).get(
                    f"{P}/template-revision-hash"):
                return
        if leader is None or not alive(leader):
            return
        self.delete(PODS, leader, propagation="Foreground")
        self.event(leader, "RecreateGroupOnPodRestart",
                   f"Worker pod {meta['name']} failed, deleted leader pod {leader['metadata']['name']} to recreate "
                   f"group {labels(leader).get(f'{P}/group-index', '')}", type_="Normal")


def _container_restarted(pod: Obj) -> bool:
    """podutils.ContainerRestarted: any (init) container restarted."""
    status = pod.get("status") or {}
    return any(c.get("restartCount", 0) > 0
               for c in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []))


OPERATORS: dict[str, type[Operator]] = {
    "leaderworkerset-controller": LeaderWorkerSetController,
    "lws-pod-controller": LeaderPodController,
}
