"""kube-controller-manager's StatefulSet controller: pods ``<sts>-<ordinal>`` from the template.

Explicit names (hostname = name, subdomain = serviceName), ordinals from ``spec.ordinals.start``
(LWS worker sets start at 1). ``OrderedReady`` creates the next ordinal only once every earlier
one is Running and Ready; ``Parallel`` creates them all at once.

As ``processReplica``: a pod that Failed or Succeeded (e.g. rejected by its kubelet) is deleted, and a missing
pod is created again under its name once the old one is gone from the API (a terminating pod keeps its
ordinal, and under OrderedReady holds back the later ones).
"""

from __future__ import annotations

from cluster.operators.base import (
    PODS,
    STATEFULSETS,
    Operator,
    alive,
    owner_ref,
    phase,
    pod_from_template,
    pod_ready,
    stable_hash,
)
from cluster.store import Obj


class StatefulSetController(Operator):
    root = STATEFULSETS
    identity = ("kube-system", "statefulset-controller")

    def sync(self, sts: Obj) -> None:
        spec, name = sts.get("spec") or {}, sts["metadata"]["name"]
        start = (spec.get("ordinals") or {}).get("start", 0)
        replicas = spec.get("replicas", 1)
        parallel = spec.get("podManagementPolicy") == "Parallel"
        pods = {p["metadata"]["name"]: p for p in self.children(PODS, sts)}
        revision = f"{name}-{stable_hash(spec.get('template') or {})}"
        for ordinal in range(start, start + replicas):
            pod = pods.get(f"{name}-{ordinal}")
            if pod is not None and phase(pod) in ("Failed", "Succeeded"):
                self.delete(PODS, pod)
                if not parallel:
                    break
                continue
            if pod is None:
                self.create(PODS, sts, self._pod(sts, ordinal, revision))
                if not parallel:
                    break
            elif not parallel and not (alive(pod) and pod_ready(pod)):
                break
        ready = sum(pod_ready(p) for p in pods.values())
        self.patch_status(STATEFULSETS, sts, {"replicas": len(pods), "readyReplicas": ready,
                                              "availableReplicas": ready, "currentReplicas": len(pods),
                                              "currentRevision": revision, "updateRevision": revision,
                                              "observedGeneration": sts["metadata"].get("generation", 1)})

    @staticmethod
    def _pod(sts: Obj, ordinal: int, revision: str) -> Obj:
        name = f"{sts['metadata']['name']}-{ordinal}"
        pod = pod_from_template(sts["spec"].get("template") or {}, {
            "controller-revision-hash": revision, "statefulset.kubernetes.io/pod-name": name,
            "apps.kubernetes.io/pod-index": str(ordinal)}, [owner_ref(sts)], name=name)
        pod["spec"]["hostname"] = name
        if sts["spec"].get("serviceName"):
            pod["spec"]["subdomain"] = sts["spec"]["serviceName"]
        return pod
