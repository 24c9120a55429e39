"""KubeRay: RayCluster, RayJob and RayService. The gang is the RayCluster's pods: one head
plus the workers of every group, all created together. The RayJob submitter pod is created
after the cluster is ready and is not part of the gang."""

from __future__ import annotations

from typing import Any, TypedDict

from gang.adapters.base import (
    Chain,
    Membership,
    Obj,
    WorkloadAdapter,
    as_int,
    labels_of,
    mapping,
    name_of,
    not_member,
    spec,
    template_pod,
)
from gang.kinds import Kind

GROUP = "ray.io"
SCHEDULER_LABEL = "ray.io/scheduler-name"


class _WorkerGroupShape(TypedDict, total=False):
    replicas: Any
    minReplicas: Any
    maxReplicas: Any
    numOfHosts: Any


class _ClusterShape(TypedDict, total=False):
    enableInTreeAutoscaling: Any
    workerGroupSpecs: list[_WorkerGroupShape]


class _JobShape(TypedDict, total=False):
    rayClusterSpec: _ClusterShape


class _ServiceShape(TypedDict, total=False):
    rayClusterConfig: _ClusterShape


def group_pods(cluster_spec: Obj, group: Obj) -> int:
    """A worker group's pods: clamp(replicas, min, max) × numOfHosts; minReplicas under in-tree autoscaling."""
    low = as_int(group.get("minReplicas"), 0)
    high = as_int(group.get("maxReplicas"), 2**31)
    wanted = low if cluster_spec.get("enableInTreeAutoscaling") is True else as_int(group.get("replicas"), 0)
    return max(low, min(wanted, high)) * max(as_int(group.get("numOfHosts"), 1), 1)


def cluster_pods(cluster_spec: Obj) -> int:
    """1 head + every worker group's pods."""
    return 1 + sum(group_pods(cluster_spec, mapping(g)) for g in cluster_spec.get("workerGroupSpecs") or [])


def _node_pod(cluster: Obj, group: Obj, name: str | None) -> Obj:
    """A head (``name`` None) or worker pod as KubeRay stamps it from its group's template."""
    cluster_name, kind = name_of(cluster), "head" if name is None else "worker"
    labels = {"ray.io/cluster": cluster_name, "ray.io/node-type": kind, "ray.io/group": name or "headgroup",
              "ray.io/identifier": f"{cluster_name}-{kind}", "ray.io/is-ray-node": "yes",
              "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"}
    prefix = f"{cluster_name}-head-" if name is None else f"{cluster_name}-{name}-worker-"
    return template_pod(group.get("template"), labels, cluster, generate_name=prefix)


def _native(obj: Obj | None, kind: str) -> str | None:
    scheduler = labels_of(obj).get(SCHEDULER_LABEL)
    return f"{kind} uses the KubeRay batch scheduler {scheduler}" if scheduler else None


def _cluster_membership(chain: Chain, cluster_spec: Obj, group: str) -> Membership:
    if chain.find(GROUP, "RayCluster") is None:
        return not_member("not a RayCluster pod (the RayJob submitter is created after the cluster is ready)")
    size = cluster_pods(cluster_spec)
    return Membership(True, f"RayCluster: head and workers ({size} pods) are created together", group, size)


class RayClusterAdapter(WorkloadAdapter):
    kind = Kind(GROUP, "RayCluster", "rayclusters")
    spec_shape = _ClusterShape

    def pod_count(self, root: Obj) -> int | None:
        return cluster_pods(spec(root))

    def membership(self, pod: Obj, chain: Chain) -> Membership:
        return _cluster_membership(chain, spec(chain.root), name_of(chain.root))

    def native_scheduler(self, root: Obj) -> str | None:
        return _native(root, "RayCluster")

    def created(self, root: Obj) -> list[Obj] | None:
        """The head and every worker group's pods together (none while suspended)."""
        cluster_spec = spec(root)
        if cluster_spec.get("suspend") is True:
            return []
        pods = [_node_pod(root, mapping(cluster_spec.get("headGroupSpec")), None)]
        for group in map(mapping, cluster_spec.get("workerGroupSpecs") or []):
            pods += [_node_pod(root, group, str(group.get("groupName", "")))
                     for _ in range(group_pods(cluster_spec, group))]
        return pods


class RayJobAdapter(WorkloadAdapter):
    kind = Kind(GROUP, "RayJob", "rayjobs")
    spec_shape = _JobShape

    def pod_count(self, root: Obj) -> int | None:
        cluster_spec = mapping(spec(root).get("rayClusterSpec"))
        return cluster_pods(cluster_spec) if cluster_spec else None

    def membership(self, pod: Obj, chain: Chain) -> Membership:
        cluster = chain.find(GROUP, "RayCluster")
        cluster_spec = spec(cluster) or mapping(spec(chain.root).get("rayClusterSpec"))
        return _cluster_membership(chain, cluster_spec, name_of(chain.root))

    def native_scheduler(self, root: Obj) -> str | None:
        return _native(root, "RayJob")


class RayServiceAdapter(WorkloadAdapter):
    """An upgrade makes a second RayCluster next to the first: one gang per RayCluster."""

    kind = Kind(GROUP, "RayService", "rayservices")
    spec_shape = _ServiceShape

    def pod_count(self, root: Obj) -> int | None:
        cluster_spec = mapping(spec(root).get("rayClusterConfig"))
        return cluster_pods(cluster_spec) if cluster_spec else None

    def membership(self, pod: Obj, chain: Chain) -> Membership:
        cluster = chain.find(GROUP, "RayCluster")
        cluster_spec = spec(cluster) or mapping(spec(chain.root).get("rayClusterConfig"))
        return _cluster_membership(chain, cluster_spec, name_of(cluster))

    def native_scheduler(self, root: Obj) -> str | None:
        return _native(root, "RayService")


ADAPTERS: tuple[WorkloadAdapter, ...] = (RayClusterAdapter(), RayJobAdapter(), RayServiceAdapter())
