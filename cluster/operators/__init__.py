"""The emulated operators and built-in controllers that turn root objects into pods, in one table.

Each entry is an ``Operator`` (a ``Loop`` with its own service-account identity) that reconciles one
root resource and creates children through the apiserver, so admission webhooks see every pod the
way a real cluster's operators send it. Behaviour follows each operator's own code and docs; the
shapes are summarised in /work/shared/operators.md. Operators whose CRD is not installed idle.
"""

from __future__ import annotations

from cluster.apiserver import ApiServer
from cluster.controllers import Loop
from cluster.operators.argo import WorkflowController
from cluster.operators.base import Operator
from cluster.operators.job import JobController
from cluster.operators.jobset import JobSetController
from cluster.operators.lws import LeaderPodController, LeaderWorkerSetController
from cluster.operators.mpi import MPIJobController
from cluster.operators.ray import RayClusterController, RayJobController, RayServiceController
from cluster.operators.spark import SparkApplicationController, SparkDriver
from cluster.operators.statefulset import StatefulSetController
from cluster.operators.training import (
    JAXJobController,
    PaddleJobController,
    PyTorchJobController,
    TFJobController,
    XGBoostJobController,
)
from cluster.operators.trainjob import TrainJobController

OPERATORS: dict[str, type[Operator]] = {
    "job-controller": JobController,
    "statefulset-controller": StatefulSetController,
    "spark-operator": SparkApplicationController,
    "spark-driver": SparkDriver,
    "pytorchjob-controller": PyTorchJobController,
    "tfjob-controller": TFJobController,
    "xgboostjob-controller": XGBoostJobController,
    "paddlejob-controller": PaddleJobController,
    "jaxjob-controller": JAXJobController,
    "mpi-operator": MPIJobController,
    "jobset-controller": JobSetController,
    "trainjob-controller": TrainJobController,
    "raycluster-controller": RayClusterController,
    "rayjob-controller": RayJobController,
    "rayservice-controller": RayServiceController,
    "leaderworkerset-controller": LeaderWorkerSetController,
    "lws-pod-controller": LeaderPodController,
    "workflow-controller": WorkflowController,
}


def start_operators(api: ApiServer, names: list[str] | None = None) -> list[Loop]:
    """Start the operators in ``names`` (default: all of ``OPERATORS``); the caller ``stop()``s them."""
    loops: list[Loop] = []
    for name in names if names is not None else OPERATORS:
        loop = OPERATORS[name](api)
        loop.name = name
        loop.start()
        loops.append(loop)
    return loops


__all__ = ["OPERATORS", "Operator", "start_operators"]
