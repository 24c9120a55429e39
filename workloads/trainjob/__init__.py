"""TrainJob (Kubeflow trainer, ``trainer.kubeflow.org``), which runs as a JobSet of the same name."""

from __future__ import annotations

from workloads.record import Resource, Row, Workload

GROUP = "trainer.kubeflow.org"

WORKLOAD = Workload(
    roots=(Resource(GROUP, "v1alpha1", "TrainJob", "trainjobs"),),
    # the runtimes a TrainJob references: the emulator's trainer reads them, the product never does
    companions=(
        Resource(GROUP, "v1alpha1", "TrainingRuntime", "trainingruntimes"),
        Resource(GROUP, "v1alpha1", "ClusterTrainingRuntime", "clustertrainingruntimes", namespaced=False),
    ),
    readme=(Row("TrainJob `trainer.kubeflow.org`", "from its JobSet; opt-in read on the TrainJob", "as JobSet"),),
)
