"""Kubeflow training-operator jobs (kubeflow.org/v1): PyTorchJob, TFJob, XGBoostJob, PaddleJob,
JAXJob and the v1 MPIJob. All pods are created together; one gang per job."""

from __future__ import annotations

from typing import Any, TypedDict

from gang.adapters.base import (
    Chain,
    Membership,
    Obj,
    WorkloadAdapter,
    as_int,
    mapping,
    name_of,
    spec,
    template_pod,
)
from gang.kinds import Kind

GROUP = "kubeflow.org"
OPERATOR = "training.kubeflow.org"  # the operator's label prefix


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
    """``restart_policy``: the framework's default replica restartPolicy, which its pods get; None for a kind whose
    pods ``created`` does not model (the v1 MPIJob's launcher and workers)."""

    role_label = "training.kubeflow.org/replica-type"  # lowercased by training-operator: master, worker, ps, ...

    def __init__(self, kind: str, plural: str, replica_field: str, api_versions: tuple[str, ...] | None = None,
                 restart_policy: str | None = "Never"):
        self.kind = Kind(GROUP, kind, plural)
        self.replica_field = replica_field
        self.api_versions = api_versions
        self.spec_shape = _training_shape(replica_field)
        self.restart_policy = restart_policy

    def roles(self, root: Obj) -> frozenset[str] | None:
        """The replica types, lowercased as training-operator labels its pods."""
        return frozenset(str(kind).lower() for kind in mapping(spec(root).get(self.replica_field)))

    def created(self, root: Obj) -> list[Obj] | None:
        """Every replica's pods at once, ``<job>-<replica type>-<index>``, labelled by job, replica type and index."""
        if self.restart_policy is None:
            return None
        job, operator, pods = name_of(root), f"{self.kind.kind.lower()}-controller", []
        for replica_type, replica in mapping(spec(root).get(self.replica_field)).items():
            replica, role = mapping(replica), str(replica_type).lower()
            for index in range(as_int(replica.get("replicas"), 1)):
                labels = {f"{OPERATOR}/job-name": job, f"{OPERATOR}/operator-name": operator,
                          f"{OPERATOR}/replica-type": role, f"{OPERATOR}/replica-index": str(index)}
                pod = template_pod(replica.get("template"), labels, root, name=f"{job}-{role}-{index}")
                policy = replica.get("restartPolicy") or self.restart_policy
                pod["spec"]["restartPolicy"] = "Never" if policy == "ExitCode" else policy
                pods.append(pod)
        return pods

    def pod_count(self, root: Obj) -> int | None:
        return replica_total(spec(root).get(self.replica_field))

    def membership(self, pod: Obj, chain: Chain) -> Membership:
        job_spec = spec(chain.root)
        pods = replica_total(job_spec.get(self.replica_field))
        return Membership(True, f"{self.kind.kind}: all {pods} pods are created together",
                          name_of(chain.root), min_available(job_spec) or pods, pods=pods)


PYTORCH = TrainingJobAdapter("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs", restart_policy="OnFailure")
TENSORFLOW = TrainingJobAdapter("TFJob", "tfjobs", "tfReplicaSpecs")
XGBOOST = TrainingJobAdapter("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs")
PADDLE = TrainingJobAdapter("PaddleJob", "paddlejobs", "paddleReplicaSpecs", restart_policy="OnFailure")
JAX = TrainingJobAdapter("JAXJob", "jaxjobs", "jaxReplicaSpecs")
MPI_V1 = TrainingJobAdapter("MPIJob", "mpijobs", "mpiReplicaSpecs", api_versions=("v1",), restart_policy=None)

ADAPTERS: tuple[WorkloadAdapter, ...] = (PYTORCH, TENSORFLOW, XGBOOST, PADDLE, JAX, MPI_V1)
