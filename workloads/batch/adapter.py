"""batch/v1 Job and CronJob: the pods a Job runs at once form the gang; one gang per Job run."""

from __future__ import annotations

from typing import TypedDict

from gang.adapters.base import (
    Chain,
    Membership,
    Obj,
    WorkloadAdapter,
    job_pods,
    mapping,
    name_of,
    spec,
    template_pod,
)
from gang.kinds import JOB, Kind
from gang.shapes import JobSpec, JobTemplate

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"  # the Job controller's, on every pod it creates


class _CronJobShape(TypedDict, total=False):
    jobTemplate: JobTemplate


def _job_membership(job: Obj) -> Membership:
    size = max(job_pods(spec(job)), 1)
    return Membership(True, f"Job runs {size} pod(s) in parallel", name_of(job), size)


class JobAdapter(WorkloadAdapter):
    kind = JOB
    spec_shape = JobSpec

    def created_pods(self, root: Obj) -> list[Obj] | None:
        """The pods the Job runs at once, ``<job>-<random>`` (generateName), none while suspended; None for an
        Indexed Job (its pods carry their index: not modelled)."""
        job_spec = spec(root)
        if job_spec.get("completionMode") == "Indexed":
            return None
        if job_spec.get("suspend") is True:
            return []
        name, uid = name_of(root), str(mapping(root.get("metadata")).get("uid") or "")
        labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                  "controller-uid": uid, "job-name": name}
        pods = [template_pod(job_spec.get("template"), labels, root, generate_name=f"{name}-")
                for _ in range(job_pods(job_spec))]
        for pod in pods:
            pod["metadata"]["finalizers"] = [*pod["metadata"].get("finalizers", []), TRACKING_FINALIZER]
        return pods

    def pod_count(self, root: Obj) -> int | None:
        return job_pods(spec(root))

    def membership(self, pod: Obj, chain: Chain) -> Membership:
        return _job_membership(chain.root)


class CronJobAdapter(WorkloadAdapter):
    """Opt-in on the CronJob, one gang per Job it creates (the Job's name is unique per run)."""

    kind = Kind("batch", "CronJob", "cronjobs")
    spec_shape = _CronJobShape

    def pod_count(self, root: Obj) -> int | None:
        return job_pods(spec(mapping(spec(root).get("jobTemplate"))))

    def membership(self, pod: Obj, chain: Chain) -> Membership:
        return _job_membership(chain.find("batch", "Job") or chain.root)


ADAPTERS: tuple[WorkloadAdapter, ...] = (JobAdapter(), CronJobAdapter())
