"""MPIJob kubeflow.org/v2beta1 (mpi-operator).

Workers are owned by the MPIJob; the launcher pod by the Job ``<name>-launcher``. Under
``launcherCreationPolicy: WaitForWorkersReady`` the launcher comes only after every worker
is Ready, so gating the workers until it exists would deadlock: workers announce it instead.
"""

from __future__ import annotations

import copy
from typing import Any, TypedDict

from gang.adapters.base import (
    Chain,
    Membership,
    Obj,
    WorkloadAdapter,
    as_int,
    controller_ref,
    expected_from_template,
    labels_of,
    mapping,
    name_of,
    spec,
    template_pod,
)
from gang.kinds import Kind
from gang.shapes import PodTemplate
from workloads.batch.adapter import job_created_pods
from workloads.training.adapter import GROUP, OPERATOR, RunPolicyShape, min_available

ROLE_LABEL = f"{OPERATOR}/job-role"


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


def _restart_policy(replica: Obj, default: str) -> str:
    policy = str(replica.get("restartPolicy") or default)
    return "Never" if policy == "ExitCode" else policy


def _launcher(job: Obj) -> Obj:
    """The launcher's batch Job, ``<job>-launcher``, with a uid of its own (the root's and its name)."""
    job_spec, name = spec(job), f"{name_of(job)}-launcher"
    replica, run_policy = _replica(job_spec, "Launcher"), mapping(job_spec.get("runPolicy"))
    template = copy.deepcopy(mapping(replica.get("template")))
    template_meta = template.setdefault("metadata", {})
    template_meta["labels"] = {**mapping(template_meta.get("labels")), **_labels(job, "launcher")}
    template.setdefault("spec", {})["restartPolicy"] = _restart_policy(replica, "OnFailure")
    launcher_spec: Obj = {"template": template, "backoffLimit": run_policy.get("backoffLimit", 6)}
    for key in ("activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        if run_policy.get(key) is not None:
            launcher_spec[key] = run_policy[key]
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "uid": f"{mapping(job.get('metadata')).get('uid')}-{name}",
                         "labels": _labels(job, "launcher"), "ownerReferences": [controller_ref(job)]},
            "spec": launcher_spec}


def _labels(job: Obj, role: str) -> dict[str, str]:
    return {f"{OPERATOR}/operator-name": "mpi-operator", f"{OPERATOR}/job-name": name_of(job), ROLE_LABEL: role}


class MPIJobV2Adapter(WorkloadAdapter):
    kind = Kind(GROUP, "MPIJob", "mpijobs")
    api_versions = ("v2beta1",)
    spec_shape = _MPIJobShape
    role_label = ROLE_LABEL  # launcher, worker

    def roles(self, root: Obj) -> frozenset[str] | None:
        return frozenset({"launcher", "worker"})

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

    def created(self, root: Obj) -> list[Obj] | None:
        """The workers ``<job>-worker-<index>``, and (unless it waits for them to be Ready) the launcher's Job, then
        its pod; none while suspended."""
        job_spec, name = spec(root), name_of(root)
        if mapping(job_spec.get("runPolicy")).get("suspend") is True:
            return []
        worker = _replica(job_spec, "Worker")
        count = as_int(worker.get("replicas"), 1) if "Worker" in mapping(job_spec.get("mpiReplicaSpecs")) else 0
        made = []
        for index in range(count):
            pod = template_pod(worker.get("template"), {**_labels(root, "worker"),
                                                        f"{OPERATOR}/replica-index": str(index)},
                               root, name=f"{name}-worker-{index}")
            pod["spec"].update(hostname=f"{name}-worker-{index}", subdomain=name,
                               restartPolicy=_restart_policy(worker, "Never"))
            made.append(pod)
        if job_spec.get("launcherCreationPolicy") != "WaitForWorkersReady":
            launcher = _launcher(root)
            made = [launcher, *made, *job_created_pods(launcher)]
        return made


ADAPTERS: tuple[WorkloadAdapter, ...] = (MPIJobV2Adapter(),)
