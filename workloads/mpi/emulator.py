"""Kubeflow mpi-operator (kubeflow.org/v2beta1 MPIJob).

Workers are pods ``<job>-worker-<i>`` owned by the MPIJob; the launcher is a batch Job
``<job>-launcher`` owned by the MPIJob, whose pod the Job controller creates. Under
``launcherCreationPolicy: WaitForWorkersReady`` the launcher Job waits until every worker is Ready.
(The hostfile ConfigMap, SSH Secret and headless Service are not emulated.)

Reactions, as ``syncHandler``: a missing worker (deleted, and gone) is created again; a Failed worker stays and
is counted (``replicaStatuses.Worker.failed``), the job then depends on its launcher; the launcher's pods are the
Job controller's (a deleted launcher pod counts toward the launcher Job's ``backoffLimit``, from
``runPolicy.backoffLimit``); a missing launcher Job is created again. The launcher Job Failed makes the MPIJob
Failed (its reason and message, e.g. BackoffLimitExceeded), Complete makes it Succeeded; a finished MPIJob
creates nothing more and cleans its workers per ``runPolicy.cleanPodPolicy`` (default None).
"""

from __future__ import annotations

import json

from cluster.operators.base import JOBS, PODS, Operator, owner_ref, phase, pod_from_template, pod_ready
from cluster.operators.job import job_finished
from cluster.store import Obj
from workloads.training.emulator import finished, set_condition

MPIJOBS = ("kubeflow.org", "v2beta1", "mpijobs")
PREFIX = "training.kubeflow.org"


def _labels(job: Obj, role: str) -> dict[str, str]:
    return {f"{PREFIX}/operator-name": "mpi-operator", f"{PREFIX}/job-name": job["metadata"]["name"],
            f"{PREFIX}/job-role": role}


def _restart_policy(replica: Obj, default: str) -> str:
    policy = replica.get("restartPolicy") or default
    return "Never" if policy == "ExitCode" else policy


class MPIJobController(Operator):
    root = MPIJOBS
    identity = ("mpi-operator", "mpi-operator")

    def sync(self, job: Obj) -> None:
        spec, name = job.get("spec") or {}, job["metadata"]["name"]
        if (spec.get("runPolicy") or {}).get("suspend"):
            return
        if finished(job):
            self._clean(job)
            return
        replicas = spec.get("mpiReplicaSpecs") or {}
        worker = replicas.get("Worker") or {}
        count = int(worker.get("replicas", 1)) if replicas.get("Worker") is not None else 0
        existing = {p["metadata"]["name"] for p in self.children(PODS, job)}
        for index in range(count):
            pod_name = f"{name}-worker-{index}"
            if pod_name not in existing:
                pod = pod_from_template(worker.get("template") or {},
                                        {**_labels(job, "worker"), f"{PREFIX}/replica-index": str(index)},
                                        [owner_ref(job)], name=pod_name)
                pod["spec"].update(hostname=pod_name, subdomain=name,
                                   restartPolicy=_restart_policy(worker, "Never"))
                self.create(PODS, job, pod)
        workers = [p for p in self.children(PODS, job) if p["metadata"]["name"] in
                   {f"{name}-worker-{i}" for i in range(count)}]
        ready = sum(pod_ready(p) for p in workers)
        launcher = self.get(JOBS, job["metadata"]["namespace"], f"{name}-launcher")
        waiting = spec.get("launcherCreationPolicy") == "WaitForWorkersReady" and ready < count
        if launcher is None and not waiting:
            launcher = self.create(JOBS, job, self._launcher(job))
        conditions = set_condition((job.get("status") or {}).get("conditions"), "Created", "MPIJobCreated",
                                   f"MPIJob {job['metadata']['namespace']}/{name} is created.")
        ended = job_finished(launcher) if launcher is not None else ""
        if ended and launcher is not None:
            reason, message = next(((c.get("reason"), c.get("message")) for c in launcher["status"]["conditions"]
                                    if c.get("type") == ended), ("", ""))
            conditions = set_condition(conditions, "Succeeded" if ended == "Complete" else "Failed",
                                       reason or ("MPIJobSucceeded" if ended == "Complete" else "MPIJobFailed"),
                                       message or f"MPIJob {job['metadata']['namespace']}/{name} has "
                                                  f"{'successfully completed' if ended == 'Complete' else 'failed'}.")
        elif launcher is not None and ready == count and any(
                phase(p) == "Running" for p in self.children(PODS, launcher)):
            conditions = set_condition(conditions, "Running", "MPIJobRunning",
                                       f"MPIJob {job['metadata']['namespace']}/{name} is running.")
        self.patch_status(MPIJOBS, job, {"conditions": conditions, "replicaStatuses": {"Worker": {
            "active": sum(phase(p) == "Running" for p in workers), "failed": sum(phase(p) == "Failed" for p in workers),
            "succeeded": sum(phase(p) == "Succeeded" for p in workers)}}})

    def _clean(self, job: Obj) -> None:
        self.clean_pods(self.children(PODS, job),
                        ((job.get("spec") or {}).get("runPolicy") or {}).get("cleanPodPolicy") or "None")

    @staticmethod
    def _launcher(job: Obj) -> Obj:
        spec = job["spec"]
        replica = (spec.get("mpiReplicaSpecs") or {}).get("Launcher") or {}
        template = json.loads(json.dumps(replica.get("template") or {}))
        meta = template.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **_labels(job, "launcher")}
        template.setdefault("spec", {})["restartPolicy"] = _restart_policy(replica, "OnFailure")
        run_policy = spec.get("runPolicy") or {}
        job_spec: Obj = {"template": template, "backoffLimit": run_policy.get("backoffLimit", 6)}
        for key in ("activeDeadlineSeconds", "ttlSecondsAfterFinished"):
            if run_policy.get(key) is not None:
                job_spec[key] = run_policy[key]
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": f"{job['metadata']['name']}-launcher", "labels": _labels(job, "launcher"),
                             "ownerReferences": [owner_ref(job)]},
                "spec": job_spec}


OPERATORS: dict[str, type[Operator]] = {"mpi-operator": MPIJobController}
