"""Kubeflow training-operator jobs (kubeflow.org/v1): PyTorchJob, TFJob, XGBoostJob, PaddleJob,
JAXJob and the v1 MPIJob. All pods are created together; one gang per job."""

from __future__ import annotations

from typing import Any, TypedDict

from gang.adapters.base import Chain, Membership, Obj, WorkloadAdapter, as_int, mapping, name_of, spec
from gang.kinds import Kind

GROUP = "kubeflow.org"


class RunPolicyShape(TypedDict, total=False):
    schedulingPolicy: Any


class _ReplicasShape(TypedDict, total=False):
    replicas: Any


def _training_shape(replica_field: str) -> type:
    """``runPolicy`` plus the kind's own replica-spec map."""
    fields = {"runPolicy": RunPolicyShape, replica_field: dict[str, _ReplicasShape]}
    shape: type = TypedDict(f"_{replica_field}Spec", fields, total=False)  # type: ignore[misc]
    return shape


def min_available(job_spec: Obj) -> int | None:
    """spec.runPolicy.schedulingPolicy.minAvailable, when the job sets one."""
    policy = mapping(mapping(job_spec.get("runPolicy")).get("schedulingPolicy"))
    value = as_int(policy.get("minAvailable"), 0)
    return value or None


def replica_total(replica_specs: object) -> int:
    """Σ replicas over the replica specs; a spec without replicas runs one pod."""
    return sum(as_int(mapping(s).get("replicas"), 1) for s in mapping(replica_specs).values())


class TrainingJobAdapter(WorkloadAdapter):
    role_label = "training.kubeflow.org/replica-type"  # lowercased by training-operator: master, worker, ps, ...

    def __init__(self, kind: str, plural: str, replica_field: str, api_versions: tuple[str, ...] | None = None):
        self.kind = Kind(GROUP, kind, plural)
        self.replica_field = replica_field
        self.api_versions = api_versions
        self.spec_shape = _training_shape(replica_field)

    def pod_count(self, root: Obj) -> int | None:
        return replica_total(spec(root).get(self.replica_field))

    def membership(self, pod: Obj, chain: Chain) -> Membership:
        job_spec = spec(chain.root)
        pods = replica_total(job_spec.get(self.replica_field))
        return Membership(True, f"{self.kind.kind}: all {pods} pods are created together",
                          name_of(chain.root), min_available(job_spec) or pods, pods=pods)


PYTORCH = TrainingJobAdapter("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs")
TENSORFLOW = TrainingJobAdapter("TFJob", "tfjobs", "tfReplicaSpecs")
XGBOOST = TrainingJobAdapter("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs")
PADDLE = TrainingJobAdapter("PaddleJob", "paddlejobs", "paddleReplicaSpecs")
JAX = TrainingJobAdapter("JAXJob", "jaxjobs", "jaxReplicaSpecs")
MPI_V1 = TrainingJobAdapter("MPIJob", "mpijobs", "mpiReplicaSpecs", api_versions=("v1",))

ADAPTERS: tuple[WorkloadAdapter, ...] = (PYTORCH, TENSORFLOW, XGBOOST, PADDLE, JAX, MPI_V1)
