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
INDEX = "batch.kubernetes.io/job-completion-index"


class _CronJobShape(TypedDict, total=False):
    jobTemplate: JobTemplate


def _job_membership(job: Obj) -> Membership:
    size = max(job_pods(spec(job)), 1)
    return Membership(True, f"Job runs {size} pod(s) in parallel", name_of(job), size)


def job_created_pods(job: Obj) -> list[Obj]:
    """The pods a Job runs at once, as the Job controller creates them: ``<job>-<random>`` (generateName), or for an
    Indexed Job ``<job>-<index>-<random>`` carrying its index (label, annotation, hostname, ``JOB_COMPLETION_INDEX``);
    none while suspended. Also the pods of the Jobs other operators create (JobSet)."""
    job_spec = spec(job)
    if job_spec.get("suspend") is True:
        return []
    name, uid = name_of(job), str(mapping(job.get("metadata")).get("uid") or "")
    labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
              "controller-uid": uid, "job-name": name}
    indexed = job_spec.get("completionMode") == "Indexed"
    pods = []
    for index in range(job_pods(job_spec)):
        pod = template_pod(job_spec.get("template"), {**labels, **({INDEX: str(index)} if indexed else {})}, job,
                           generate_name=f"{name}-{index}-" if indexed else f"{name}-")
        pod["metadata"]["finalizers"] = [*pod["metadata"].get("finalizers", []), TRACKING_FINALIZER]
        if indexed:
            pod["metadata"]["annotations"] = {**pod["metadata"].get("annotations", {}), INDEX: str(index)}
            pod["spec"]["hostname"] = f"{name}-{index}"
            env = {"name": "JOB_COMPLETION_INDEX",
                   "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{INDEX}']"}}}
            for container in [*pod["spec"].get("initContainers", []), *pod["spec"].get("containers", [])]:
                container["env"] = [*container.get("env", []), dict(env)]
        pods.append(pod)
    return pods


class JobAdapter(WorkloadAdapter):
    kind = JOB
    spec_shape = JobSpec

    def created(self, root: Obj) -> list[Obj] | None:
        return job_created_pods(root)

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
