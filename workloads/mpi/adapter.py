"""MPIJob kubeflow.org/v2beta1 (mpi-operator).

Workers are owned by the MPIJob; the launcher pod by the Job ``<name>-launcher``. Under
``launcherCreationPolicy: WaitForWorkersReady`` the launcher comes only after every worker
is Ready, so gating the workers until it exists would deadlock: workers announce it instead.
"""

from __future__ import annotations

from typing import Any, TypedDict

from gang.adapters.base import (
    Chain,
    Membership,
    Obj,
    WorkloadAdapter,
    as_int,
    expected_from_template,
    labels_of,
    mapping,
    name_of,
    spec,
)
from gang.kinds import Kind
from gang.shapes import PodTemplate
from workloads.training.adapter import GROUP, RunPolicyShape, min_available

ROLE_LABEL = "training.kubeflow.org/job-role"


class _ReplicasShape(TypedDict, total=False):
    replicas: Any
    template: PodTemplate  # the launcher is announced from its template


class _MPIJobShape(TypedDict, total=False):
    """A superset of the v1 MPIJob's (training adapter): the owner cache decodes both versions with it."""

    runPolicy: RunPolicyShape
    mpiReplicaSpecs: dict[str, _ReplicasShape]
    launcherCreationPolicy: Any


def _replica(job_spec: Obj, name: str) -> Obj:
    return mapping(mapping(job_spec.get("mpiReplicaSpecs")).get(name))


class MPIJobV2Adapter(WorkloadAdapter):
    kind = Kind(GROUP, "MPIJob", "mpijobs")
    api_versions = ("v2beta1",)
    spec_shape = _MPIJobShape
    role_label = ROLE_LABEL  # launcher, worker

    def pod_count(self, root: Obj) -> int | None:
        return as_int(_replica(spec(root), "Worker").get("replicas"), 0) + 1

    def membership(self, pod: Obj, chain: Chain) -> Membership:
        job_spec = spec(chain.root)
        pods = self.pod_count(chain.root) or 1
        size = min_available(job_spec) or pods
        group = name_of(chain.root)
        launcher = labels_of(pod).get(ROLE_LABEL) == "launcher" or chain.find("batch", "Job") is not None
        if job_spec.get("launcherCreationPolicy") != "WaitForWorkersReady":
            return Membership(True, "MPIJob: launcher and workers are created together", group, size, pods=pods)
        if launcher:
            return Membership(True, "MPIJob launcher: late member (WaitForWorkersReady)", group, size, late=True,
                              pods=pods)
        expected = expected_from_template("launcher", 1, _replica(job_spec, "Launcher").get("template"))
        return Membership(True, "MPIJob worker: first stage, the launcher follows once workers are Ready",
                          group, size, expected=(expected,), pods=pods)


ADAPTERS: tuple[WorkloadAdapter, ...] = (MPIJobV2Adapter(),)
