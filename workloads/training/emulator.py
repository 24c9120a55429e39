"""Kubeflow training-operator (kubeflow.org/v1): PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob.

All pods of a job are created in one pass, named ``<job>-<replica type, lower case>-<index>``, owned by the job,
labelled with the job name, operator name, replica type/index and ``job-role=master`` where the framework's
IsMasterRole says so. The replica ``restartPolicy`` defaults per framework (the ``<Kind>DefaultRestartPolicy`` of
pkg/apis/kubeflow.org/v1/*_types.go: PyTorchJob and PaddleJob OnFailure, the others Never) and becomes the pod's
(``ExitCode``: Never). (The per-pod Services are not emulated.)

Reaction to pods going away or failing, as ``ReconcilePods`` and the frameworks' ``UpdateJobStatus`` (release 1.8/
1.9) do:

- a missing pod (deleted, and gone) is created again under the same name; a terminating one holds its index;
- a Failed pod whose replica restarts (OnFailure, Always, or ExitCode with a retryable exit code >= 128; a pod
  rejected by its kubelet has no exit code, which counts as retryable) is deleted, condition Restarting, and is
  recreated once gone;
- ``UpdateJobReplicaStatuses`` counts a Failed pod, and a *Running* pod being deleted, as failed. Then
  PyTorchJob, JAXJob, PaddleJob: when the failed ones leave the replica short (replicas > succeeded + running),
  Restarting unless the replica's restartPolicy is Never, which fails the job ("<Kind> <name> is failed because
  1 Worker replica(s) failed."); TFJob fails unless it is already restarting ("TFJob <ns>/<name> has failed
  because ..."); XGBoostJob restarts only under ExitCode, else fails;
- a finished job (Succeeded or Failed) creates nothing more; its pods are cleaned per ``runPolicy.cleanPodPolicy``
  (default None; TFJob Running): Running deletes the pods still running or pending, All every pod.
Success: every Master replica (else every pod) Succeeded. Container restart counts and ``backoffLimit`` are not
emulated (the emulated kubelet never restarts containers).
"""

from __future__ import annotations

from typing import ClassVar

from cluster.operators.base import GVR, PODS, Operator, owner_ref, phase, pod_from_template
from cluster.store import Obj, now

PREFIX = "training.kubeflow.org"
_RESTARTING = ("OnFailure", "Always")


def set_condition(conditions: list[Obj] | None, type_: str, reason: str, message: str) -> list[Obj]:
    """``UpdateJobConditions``: ``type_`` True, replacing its own kind; Running and Restarting replace each other;
    a finished job's Running condition turns False."""
    current = list(conditions or [])
    if any(c.get("type") == type_ and c.get("status") == "True" and c.get("reason") == reason for c in current):
        return current
    kept = []
    for condition in current:
        if condition.get("type") == type_ or {type_, condition.get("type")} == {"Running", "Restarting"}:
            continue
        if type_ in ("Succeeded", "Failed") and condition.get("type") == "Running":
            condition = {**condition, "status": "False"}
        kept.append(condition)
    stamp = now()
    return [*kept, {"type": type_, "status": "True", "reason": reason, "message": message,
                    "lastUpdateTime": stamp, "lastTransitionTime": stamp}]


def finished(job: Obj) -> bool:
    return any(c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def _exit_code(pod: Obj) -> int:
    """The first terminated container's exit code; 0xbeef (the operator's magic number) when none reported one."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            return int(terminated.get("exitCode", 0))
    return 0xBEEF


class TrainingJobController(Operator):
    """One framework controller of the training-operator binary."""

    identity = ("kubeflow", "training-operator")
    replica_field: ClassVar[str]
    order: ClassVar[tuple[str, ...]] = ()  # GetReconcileOrders; other types follow in spec order
    default_restart_policy: ClassVar[str] = "Never"
    default_clean_pod_policy: ClassVar[str] = "None"

    def is_master(self, specs: Obj, replica_type: str, index: int) -> bool:
        return replica_type == "Master"

    def sync(self, job: Obj) -> None:
        specs = (job.get("spec") or {}).get(self.replica_field) or {}
        kind, meta = job["kind"], job["metadata"]
        if finished(job):
            self._clean(job)
            return
        existing = {p["metadata"]["name"]: p for p in self.children(PODS, job)}
        conditions = set_condition((job.get("status") or {}).get("conditions"), "Created", f"{kind}Created",
                                   f"{kind} {meta['name']} is created.")
        restarting = any(c.get("type") == "Restarting" and c.get("status") == "True" for c in conditions)
        types = [t for t in self.order if t in specs] + [t for t in specs if t not in self.order]
        statuses: dict[str, dict[str, int]] = {}
        for replica_type in types:
            spec, counts = specs[replica_type], {"active": 0, "succeeded": 0, "failed": 0}
            statuses[replica_type] = counts
            for index in range(int(spec.get("replicas", 1))):
                name = f"{meta['name']}-{replica_type.lower()}-{index}"
                pod = existing.get(name)
                if pod is None:
                    self.create(PODS, job, self._pod(job, specs, replica_type, index, name))
                    continue
                policy = spec.get("restartPolicy") or self.default_restart_policy
                if phase(pod) == "Failed" and (policy in _RESTARTING or (policy == "ExitCode"
                                                                         and _exit_code(pod) >= 128)):
                    self.delete(PODS, pod)
                    restarting = True
                    conditions = set_condition(conditions, "Restarting", f"{kind}Restarting",
                                               f"Job {meta['name']} is restarting because {replica_type} "
                                               "replica(s) failed.")
                if phase(pod) == "Running":
                    counts["failed" if pod["metadata"].get("deletionTimestamp") else "active"] += 1
                elif phase(pod) in ("Succeeded", "Failed"):
                    counts[phase(pod).lower()] += 1
        conditions = self._job_conditions(job, specs, statuses, conditions, restarting)
        self.patch_status(self.root, job, {"conditions": conditions, "replicaStatuses": statuses})

    def _job_conditions(self, job: Obj, specs: Obj, statuses: dict[str, dict[str, int]], conditions: list[Obj],
                        restarting: bool) -> list[Obj]:
        kind, meta = job["kind"], job["metadata"]
        deciding = ["Master"] if "Master" in statuses else list(statuses)
        if deciding and all(statuses[t]["succeeded"] == int(specs[t].get("replicas", 1)) for t in deciding):
            return set_condition(conditions, "Succeeded", f"{kind}Succeeded",
                                 f"{kind} {meta['namespace']}/{meta['name']} successfully completed.")
        total = sum(int(s.get("replicas", 1)) for s in specs.values())
        if total and sum(c["active"] for c in statuses.values()) == total:
            conditions = set_condition(conditions, "Running", f"{kind}Running",
                                       f"{kind} {meta['namespace']}/{meta['name']} is running.")
        for replica_type, counts in statuses.items():
            if counts["failed"]:
                policy = specs[replica_type].get("restartPolicy") or self.default_restart_policy
                conditions = self.on_failed(job, replica_type, counts, int(specs[replica_type].get("replicas", 1)),
                                            policy, conditions, restarting)
        return conditions

    def on_failed(self, job: Obj, replica_type: str, counts: dict[str, int], replicas: int, policy: str,
                  conditions: list[Obj], restarting: bool) -> list[Obj]:
        """PyTorchJob/JAXJob/PaddleJob: a replica left short by failed pods restarts, or fails under Never."""
        kind, name = job["kind"], job["metadata"]["name"]
        if replicas <= counts["succeeded"] + counts["active"]:
            return conditions
        if policy != "Never":
            return set_condition(conditions, "Restarting", f"{kind}Restarting", f"{kind} {name} is restarting "
                                 f"because {counts['failed']} {replica_type} replica(s) failed.")
        return set_condition(conditions, "Failed", f"{kind}Failed",
                             f"{kind} {name} is failed because {counts['failed']} {replica_type} replica(s) failed.")

    def _clean(self, job: Obj) -> None:
        policy = ((job.get("spec") or {}).get("runPolicy") or {}).get("cleanPodPolicy") or self.default_clean_pod_policy
        self.clean_pods(self.children(PODS, job), policy)

    def _pod(self, job: Obj, specs: Obj, replica_type: str, index: int, name: str) -> Obj:
        replica = specs[replica_type]
        pod_labels = {f"{PREFIX}/job-name": job["metadata"]["name"],
                      f"{PREFIX}/operator-name": f"{job['kind'].lower()}-controller",
                      f"{PREFIX}/replica-type": replica_type.lower(), f"{PREFIX}/replica-index": str(index)}
        if self.is_master(specs, replica_type, index):
            pod_labels[f"{PREFIX}/job-role"] = "master"
        pod = pod_from_template(replica.get("template") or {}, pod_labels, [owner_ref(job)], name=name)
        policy = replica.get("restartPolicy") or self.default_restart_policy
        pod["spec"]["restartPolicy"] = "Never" if policy == "ExitCode" else policy
        return pod


def _kubeflow(plural: str) -> GVR:
    return ("kubeflow.org", "v1", plural)


class PyTorchJobController(TrainingJobController):
    root = _kubeflow("pytorchjobs")
    replica_field = "pytorchReplicaSpecs"
    order = ("Master", "Worker")
    default_restart_policy = "OnFailure"


class TFJobController(TrainingJobController):
    root = _kubeflow("tfjobs")
    replica_field = "tfReplicaSpecs"
    order = ("PS", "Master", "Chief", "Worker")
    default_clean_pod_policy = "Running"

    def on_failed(self, job: Obj, replica_type: str, counts: dict[str, int], replicas: int, policy: str,
                  conditions: list[Obj], restarting: bool) -> list[Obj]:
        """Any failed pod fails the job, unless the job is restarting already."""
        if restarting:
            return conditions
        meta = job["metadata"]
        return set_condition(conditions, "Failed", "TFJobFailed", f"TFJob {meta['namespace']}/{meta['name']} has "
                             f"failed because {counts['failed']} {replica_type} replica(s) failed.")

    def is_master(self, specs: Obj, replica_type: str, index: int) -> bool:
        if "Chief" in specs or "Master" in specs:
            return replica_type in ("Chief", "Master")
        return replica_type == "Worker" and index == 0


class XGBoostJobController(TrainingJobController):
    root = _kubeflow("xgboostjobs")
    replica_field = "xgbReplicaSpecs"
    order = ("Master", "Worker")

    def on_failed(self, job: Obj, replica_type: str, counts: dict[str, int], replicas: int, policy: str,
                  conditions: list[Obj], restarting: bool) -> list[Obj]:
        """Any failed pod fails the job, unless its replica restarts on exit codes."""
        name, verb = job["metadata"]["name"], "restarting" if policy == "ExitCode" else "failed"
        return set_condition(conditions, "Restarting" if policy == "ExitCode" else "Failed",
                             "XGBoostJobRestarting" if policy == "ExitCode" else "XGBoostJobFailed",
                             f"XGBoostJob {name} is {verb} because {counts['failed']} {replica_type} replica(s) "
                             "failed.")


class PaddleJobController(TrainingJobController):
    root = _kubeflow("paddlejobs")
    replica_field = "paddleReplicaSpecs"
    order = ("Master", "Worker")
    default_restart_policy = "OnFailure"  # PaddleJobDefaultRestartPolicy (paddlepaddle_types.go)


class JAXJobController(TrainingJobController):
    root = _kubeflow("jaxjobs")
    replica_field = "jaxReplicaSpecs"

    def is_master(self, specs: Obj, replica_type: str, index: int) -> bool:
        return index == 0


OPERATORS: dict[str, type[Operator]] = {
    "pytorchjob-controller": PyTorchJobController,
    "tfjob-controller": TFJobController,
    "xgboostjob-controller": XGBoostJobController,
    "paddlejob-controller": PaddleJobController,
    "jaxjob-controller": JAXJobController,
}
