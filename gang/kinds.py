"""Object kinds the owner walk knows about, and how to address them in the API."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    group: str
    kind: str
    plural: str
    namespaced: bool = True


def split_api_version(api_version: str) -> tuple[str, str]:
    """``"batch/v1"`` -> ``("batch", "v1")``; ``"v1"`` -> ``("", "v1")``."""
    group, _, version = api_version.rpartition("/")
    return group, version


def api_path(kind: Kind, api_version: str, namespace: str | None, name: str) -> str:
    """REST path of one object, e.g. ``/apis/batch/v1/namespaces/ns/jobs/name``."""
    base = f"/apis/{api_version}" if kind.group else f"/api/{api_version}"
    scope = f"/namespaces/{namespace}" if kind.namespaced else ""
    return f"{base}{scope}/{kind.plural}/{name}"


POD = Kind("", "Pod", "pods")
JOB = Kind("batch", "Job", "jobs")
STATEFUL_SET = Kind("apps", "StatefulSet", "statefulsets")
NAMESPACE = Kind("", "Namespace", "namespaces", namespaced=False)
POD_GROUP = Kind("scheduling.kubenexus.io", "PodGroup", "podgroups")

# Objects that sit between a pod and its root (Spark driver pod, LWS leader pod and
# StatefulSets, JobSet/TrainJob/MPI/RayJob Jobs). A chain that ends at one of them has no root.
INTERMEDIATE = {(k.group, k.kind): k for k in (POD, JOB, STATEFUL_SET)}

# Owners of ordinary long-running workloads: not gang workloads, no warning needed.
NON_BATCH_OWNERS = frozenset(
    {
        ("apps", "ReplicaSet"),
        ("apps", "DaemonSet"),
        ("apps", "Deployment"),
        ("", "ReplicationController"),
        ("", "Node"),
    }
)
