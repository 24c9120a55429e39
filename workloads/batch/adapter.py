"""batch/v1 Job and CronJob: the pods a Job runs at once form the gang; one gang per Job run."""

from __future__ import annotations

from typing import TypedDict

from gang.adapters.base import Chain, Membership, Obj, WorkloadAdapter, job_pods, mapping, name_of, spec
from gang.kinds import JOB, Kind
from gang.shapes import JobSpec, JobTemplate


class _CronJobShape(TypedDict, total=False):
    jobTemplate: JobTemplate


def _job_membership(job: Obj) -> Membership:
    size = max(job_pods(spec(job)), 1)
    return Membership(True, f"Job runs {size} pod(s) in parallel", name_of(job), size)


class JobAdapter(WorkloadAdapter):
    kind = JOB
    spec_shape = JobSpec

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
