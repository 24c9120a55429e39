"""JobSet (``jobset.x-k8s.io``)."""

from __future__ import annotations

from workloads.record import Resource, Row, Workload

WORKLOAD = Workload(
    roots=(Resource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),),
    readme=(
        Row("JobSet `jobset.x-k8s.io`", "Σ replicas × min(parallelism, completions)",
            "replicated jobs with `dependsOn`, or all but the first under `InOrder`; a restart starts a new gang "
            "`<name>-r<attempt>`"),
    ),
)
