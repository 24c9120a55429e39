"""batch/v1 Job and CronJob: built into Kubernetes (no CRD; the emulator's built-in job controller runs Jobs)."""

from __future__ import annotations

from workloads.record import Example, Resource, Row, Workload

WORKLOAD = Workload(
    roots=(
        Resource("batch", "v1", "Job", "jobs", crd=False),
        Resource("batch", "v1", "CronJob", "cronjobs", crd=False),
    ),
    readme=(Row("Job, CronJob `batch/v1`", "min(parallelism, completions)", "no; one gang per Job run"),),
    examples=(Example("batch-job-pod.yaml", "batch-job-objects.yaml", "skip", None),),
)
