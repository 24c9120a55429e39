"""Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1): a TrainJob becomes a JobSet of the same name.

The JobSet comes from the runtime in ``spec.runtimeRef`` (a TrainingRuntime in the namespace or a
ClusterTrainingRuntime: its ``spec.template``), as the trainer's JobSet plugin builds it: the
replicated job labelled ``trainer.kubeflow.org/trainjob-ancestor-step: trainer`` gets 1 replica and
parallelism = completions = numNodes (``spec.trainer.numNodes``, else the runtime's
``mlPolicy.numNodes``, else 1), and its ``node`` container the trainer's image/command/args/resources.
A runtime that does not exist falls back to a single ``node`` replicated job (the real trainer
would refuse the TrainJob instead).

Pods deleted or failing are the business of the Job controller and the JobSet (its ``failurePolicy`` comes from
the runtime); the TrainJob takes the JobSet's end as its own (condition Complete or Failed, with the JobSet's
reason and message), and a JobSet deleted before that is created again.
"""

from __future__ import annotations

import copy

from cluster.operators.base import Operator, owner_ref, with_condition
from cluster.store import Obj
from workloads.jobset.emulator import JOBSETS

TRAINJOBS = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")
RUNTIMES = ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes")
CLUSTER_RUNTIMES = ("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes")
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
DEFAULT_RUNTIME: Obj = {"template": {"spec": {"replicatedJobs": [{
    "name": "node", "template": {"metadata": {"labels": {ANCESTOR: "trainer"}}, "spec": {"template": {"spec": {
        "containers": [{"name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"}]}}}}}]}}}


class TrainJobController(Operator):
    root = TRAINJOBS
    identity = ("kubeflow-system", "kubeflow-trainer-controller-manager")

    def sync(self, train: Obj) -> None:
        meta, conditions = train["metadata"], (train.get("status") or {}).get("conditions")
        if any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions or []):
            return
        jobset = self.get(JOBSETS, meta["namespace"], meta["name"])
        if jobset is None and self.served(JOBSETS) is not None:
            self.create(JOBSETS, train, self._jobset(train))
            return
        for condition in (jobset or {}).get("status", {}).get("conditions") or []:
            ended = {"Completed": "Complete", "Failed": "Failed"}.get(condition.get("type", ""))
            if ended and condition.get("status") == "True":
                self.patch_status(TRAINJOBS, train, {"conditions": with_condition(
                    conditions, ended, "True", condition.get("reason", ""), condition.get("message", ""))})

    def _runtime(self, train: Obj) -> Obj:
        ref = (train.get("spec") or {}).get("runtimeRef") or {}
        if ref.get("kind") == "TrainingRuntime":
            found = self.get(RUNTIMES, train["metadata"]["namespace"], ref.get("name", ""))
        else:
            found = next((r for r in self.items(CLUSTER_RUNTIMES) if r["metadata"]["name"] == ref.get("name")), None)
        return (found or {}).get("spec") or DEFAULT_RUNTIME

    def _jobset(self, train: Obj) -> Obj:
        runtime = copy.deepcopy(self._runtime(train))
        trainer = (train.get("spec") or {}).get("trainer") or {}
        nodes = int(trainer.get("numNodes") or (runtime.get("mlPolicy") or {}).get("numNodes") or 1)
        template = runtime.get("template") or {}
        spec = template.get("spec") or {}
        for rjob in spec.get("replicatedJobs") or []:
            job_template = rjob.setdefault("template", {})
            if ((job_template.get("metadata") or {}).get("labels") or {}).get(ANCESTOR) == "trainer":
                rjob["replicas"] = 1
                job_template.setdefault("spec", {}).update(parallelism=nodes, completions=nodes)
            pod_spec = ((job_template.get("spec") or {}).get("template") or {}).get("spec") or {}
            for container in pod_spec.get("containers") or []:
                if container.get("name") != "node":
                    continue
                for key in ("image", "command", "args"):
                    if trainer.get(key):
                        container[key] = trainer[key]
                if trainer.get("resourcesPerNode"):
                    container["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
        meta = template.get("metadata") or {}
        return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": train["metadata"]["name"], "labels": meta.get("labels") or {},
                             "annotations": meta.get("annotations") or {}, "ownerReferences": [owner_ref(train)]},
                "spec": spec}


OPERATORS: dict[str, type[Operator]] = {"trainjob-controller": TrainJobController}
