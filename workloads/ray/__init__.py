"""KubeRay: RayCluster, RayJob and RayService."""

from __future__ import annotations

from workloads.record import Resource, Row, Workload

WORKLOAD = Workload(
    roots=(
        Resource("ray.io", "v1", "RayCluster", "rayclusters"),
        Resource("ray.io", "v1", "RayJob", "rayjobs"),
        Resource("ray.io", "v1", "RayService", "rayservices"),
    ),
    readme=(
        Row("RayCluster, RayJob, RayService `ray.io/v1`",
            "1 head + Σ clamp(replicas, min, max) × numOfHosts (minReplicas under autoscaling)",
            "no; the RayJob submitter is not a member; one gang per RayCluster of a RayService"),
    ),
)
