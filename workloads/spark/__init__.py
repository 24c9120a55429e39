"""Spark (kubeflow spark-operator): SparkApplication and ScheduledSparkApplication."""

from __future__ import annotations

from workloads.record import Example, Resource, Row, Workload

GROUP = "sparkoperator.k8s.io"

WORKLOAD = Workload(
    roots=(
        Resource(GROUP, "v1beta2", "SparkApplication", "sparkapplications", ("sparkapp",)),
        Resource(GROUP, "v1beta2", "ScheduledSparkApplication", "scheduledsparkapplications", ("scheduledsparkapp",)),
    ),
    readme=(
        Row("SparkApplication `sparkoperator.k8s.io/v1beta2`",
            "1 driver + executors (`executor.instances`, dynamic allocation: max(instances, initial, min))",
            "executors are created by the driver after it runs: the driver announces them (cpu = coreRequest or "
            "cores; memory + overhead; GPUs; selectors, tolerations, affinity)"),
        Row("ScheduledSparkApplication", "per run, as SparkApplication; opt-in read on the schedule",
            "as SparkApplication"),
    ),
    examples=(
        Example("spark-pi-driver.yaml", "spark-pi-objects.yaml", "gang", "spark-pi"),
        Example("spark-pi-executor.yaml", "spark-pi-objects.yaml", "gang", "spark-pi"),
    ),
)
