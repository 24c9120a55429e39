"""MPIJob ``kubeflow.org/v2beta1`` (mpi-operator)."""

from __future__ import annotations

from workloads.record import Resource, Row, Workload

WORKLOAD = Workload(
    roots=(Resource("kubeflow.org", "v2beta1", "MPIJob", "mpijobs"),),
    readme=(
        Row("MPIJob `kubeflow.org/v2beta1`", "minAvailable, else workers + 1 launcher",
            "launcher under `launcherCreationPolicy: WaitForWorkersReady`"),
    ),
)
