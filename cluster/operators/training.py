"""Kubeflow training-operator (kubeflow.org/v1): PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob.

All pods of a job are created in one pass, named ``<job>-<replica type, lower case>-<index>``, owned
by the job, labelled with the job name, operator name, replica type/index and ``job-role=master``
where the framework's IsMasterRole says so. (The per-pod Services are not emulated.)
"""

from __future__ import annotations

from typing import ClassVar

from cluster.operators.base import GVR, PODS, Operator, owner_ref, phase, pod_from_template, with_condition
from cluster.store import Obj

PREFIX = "training.kubeflow.org"


class TrainingJobController(Operator):
    """One framework controller of the training-operator binary."""

    identity = ("kubeflow", "training-operator")
    replica_field: ClassVar[str]
    order: ClassVar[tuple[str, ...]] = ()  # GetReconcileOrders; other types follow in spec order

    def is_master(self, specs: Obj, replica_type: str, index: int) -> bool:
        return replica_type == "Master"

    def sync(self, job: Obj) -> None:
        specs = (job.get("spec") or {}).get(self.replica_field) or {}
        existing = {p["metadata"]["name"]: p for p in self.children(PODS, job)}
        types = [t for t in self.order if t in specs] + [t for t in specs if t not in self.order]
        for replica_type in types:
            for index in range(int(specs[replica_type].get("replicas", 1))):
                name = f"{job['metadata']['name']}-{replica_type.lower()}-{index}"
                if name not in existing:
                    self.create(PODS, job, self._pod(job, specs, replica_type, index, name))
        pods = self.children(PODS, job)
        conditions = with_condition((job.get("status") or {}).get("conditions"), "Created", "True", "JobCreated")
        if pods and all(phase(p) == "Running" for p in pods):
            conditions = with_condition(conditions, "Running", "True", "JobRunning")
        self.patch_status(self.root, job, {"conditions": conditions})

    def _pod(self, job: Obj, specs: Obj, replica_type: str, index: int, name: str) -> Obj:
        replica = specs[replica_type]
        pod_labels = {f"{PREFIX}/job-name": job["metadata"]["name"],
                      f"{PREFIX}/operator-name": f"{job['kind'].lower()}-controller",
                      f"{PREFIX}/replica-type": replica_type.lower(), f"{PREFIX}/replica-index": str(index)}
        if self.is_master(specs, replica_type, index):
            pod_labels[f"{PREFIX}/job-role"] = "master"
        pod = pod_from_template(replica.get("template") or {}, pod_labels, [owner_ref(job)], name=name)
        policy = replica.get("restartPolicy")
        if policy:
            pod["spec"]["restartPolicy"] = "Never" if policy == "ExitCode" else policy
        return pod


def _kubeflow(plural: str) -> GVR:
    return ("kubeflow.org", "v1", plural)


class PyTorchJobController(TrainingJobController):
    root = _kubeflow("pytorchjobs")
    replica_field = "pytorchReplicaSpecs"
    order = ("Master", "Worker")


class TFJobController(TrainingJobController):
    root = _kubeflow("tfjobs")
    replica_field = "tfReplicaSpecs"
    order = ("PS", "Master", "Chief", "Worker")

    def is_master(self, specs: Obj, replica_type: str, index: int) -> bool:
        if "Chief" in specs or "Master" in specs:
            return replica_type in ("Chief", "Master")
        return replica_type == "Worker" and index == 0


class XGBoostJobController(TrainingJobController):
    root = _kubeflow("xgboostjobs")
    replica_field = "xgbReplicaSpecs"
    order = ("Master", "Worker")


class PaddleJobController(TrainingJobController):
    root = _kubeflow("paddlejobs")
    replica_field = "paddleReplicaSpecs"
    order = ("Master", "Worker")


class JAXJobController(TrainingJobController):
    root = _kubeflow("jaxjobs")
    replica_field = "jaxReplicaSpecs"

    def is_master(self, specs: Obj, replica_type: str, index: int) -> bool:
        return index == 0
