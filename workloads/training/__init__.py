"""Kubeflow training-operator jobs (``kubeflow.org/v1``): PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob and
the v1 MPIJob."""

from __future__ import annotations

from workloads.record import Example, Resource, Row, Workload

GROUP = "kubeflow.org"

WORKLOAD = Workload(
    roots=(
        Resource(GROUP, "v1", "PyTorchJob", "pytorchjobs"),
        Resource(GROUP, "v1", "TFJob", "tfjobs"),
        Resource(GROUP, "v1", "XGBoostJob", "xgboostjobs"),
        Resource(GROUP, "v1", "PaddleJob", "paddlejobs"),
        Resource(GROUP, "v1", "JAXJob", "jaxjobs"),
        # mpijobs.kubeflow.org is v1 or v2beta1 in a given cluster; the emulator serves mpi-operator's v2beta1
        Resource(GROUP, "v1", "MPIJob", "mpijobs", crd=False),
    ),
    readme=(
        Row("PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob, MPIJob `kubeflow.org/v1`",
            "`runPolicy.schedulingPolicy.minAvailable`, else Σ replicas", "no"),
    ),
    examples=(Example("pytorch-worker.yaml", "pytorch-objects.yaml", "gang", "resnet"),),
)
