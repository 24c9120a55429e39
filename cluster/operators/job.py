"""kube-controller-manager's Job controller, for every batch/v1 Job (user, JobSet, mpi-operator, RayJob).

It keeps min(parallelism, remaining completions) pods active, named by ``generateName`` only
(``<job>-`` or, Indexed, ``<job>-<index>-``), so webhooks see no pod name at admission; it counts
Ready/Succeeded/Failed pods into the Job status and marks the Job Complete or Failed.
"""

from __future__ import annotations

from cluster.operators.base import (
    JOBS,
    PODS,
    Operator,
    alive,
    owner_ref,
    phase,
    pod_from_template,
    pod_ready,
    with_condition,
)
from cluster.store import Obj, now

INDEX = "batch.kubernetes.io/job-completion-index"


def _index(pod: Obj) -> int | None:
    value = ((pod["metadata"].get("annotations") or {}).get(INDEX)
             or (pod["metadata"].get("labels") or {}).get(INDEX))
    return int(value) if value is not None and str(value).isdigit() else None


class JobController(Operator):
    root = JOBS
    identity = ("kube-system", "job-controller")

    def sync(self, job: Obj) -> None:
        spec, status = job.get("spec") or {}, job.get("status") or {}
        if any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in status.get("conditions") or []):
            return
        pods = self.children(PODS, job)
        active = [p for p in pods if alive(p) and phase(p) not in ("Succeeded", "Failed")]
        succeeded = [p for p in pods if phase(p) == "Succeeded"]
        failed = sum(phase(p) == "Failed" for p in pods)
        parallelism, completions = spec.get("parallelism", 1), spec.get("completions")
        indexed = spec.get("completionMode") == "Indexed" and completions is not None
        done_indexes = {_index(p) for p in succeeded} if indexed else set()
        done = (len(done_indexes) >= completions if indexed else len(succeeded) >= completions) \
            if completions is not None else bool(succeeded) and not active
        new_status: Obj = {"active": len(active), "ready": sum(pod_ready(p) for p in active),
                           "succeeded": len(succeeded), "failed": failed, "startTime": status.get("startTime") or now()}
        if done or failed > spec.get("backoffLimit", 6):
            kind, reason = ("Complete", "") if done else ("Failed", "BackoffLimitExceeded")
            new_status["conditions"] = with_condition(status.get("conditions"), kind, "True", reason)
            if done:
                new_status["completionTime"] = now()
        elif not spec.get("suspend"):
            self._create_missing(job, active, len(done_indexes) if indexed else len(succeeded), done_indexes,
                                 indexed, parallelism, completions)
        self.patch_status(JOBS, job, {k: v for k, v in new_status.items() if v is not None})

    def _create_missing(self, job: Obj, active: list[Obj], succeeded: int, done_indexes: set[int | None],
                        indexed: bool, parallelism: int, completions: int | None) -> None:
        # without completions, no new pod starts once one succeeded
        wanted = (0 if succeeded else parallelism) if completions is None else min(parallelism, completions - succeeded)
        missing = wanted - len(active)
        if missing <= 0:
            return
        if indexed:
            busy = done_indexes | {_index(p) for p in active}
            for index in [i for i in range(completions or 0) if i not in busy][:missing]:
                self.create(PODS, job, self._pod(job, index))
        else:
            for _ in range(missing):
                self.create(PODS, job, self._pod(job, None))

    @staticmethod
    def _pod(job: Obj, index: int | None) -> Obj:
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        job_labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                      "controller-uid": uid, "job-name": name}
        prefix, annotations = f"{name}-", None
        if index is not None:
            job_labels[INDEX] = str(index)
            annotations = {INDEX: str(index)}
            prefix = f"{name}-{index}-"
        pod = pod_from_template(job["spec"].get("template") or {}, job_labels, [owner_ref(job)],
                                generate_name=prefix, annotations=annotations)
        if index is not None:
            pod["spec"]["hostname"] = f"{name}-{index}"
            env = {"name": "JOB_COMPLETION_INDEX",
                   "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{INDEX}']"}}}
            for key in ("initContainers", "containers"):
                for container in pod["spec"].get(key) or []:
                    container.setdefault("env", []).append(dict(env))
        return pod
