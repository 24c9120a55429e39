"""JobSet (jobset.x-k8s.io); TrainJob (workloads/trainjob/) runs as one.

Pods come from Jobs stamped out of ``spec.replicatedJobs``. Replicated jobs with
``dependsOn`` (or all but the first under ``startupPolicyOrder: InOrder``) start later; pods
of the first stage announce them. A JobSet restart recreates every Job with a new
``restart-attempt`` label, which starts a new gang.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any, TypedDict

from gang.adapters.base import (
    Chain,
    Membership,
    Obj,
    WorkloadAdapter,
    as_int,
    controller_ref,
    expected_from_template,
    job_pods,
    labels_of,
    mapping,
    name_of,
    not_member,
    spec,
)
from gang.kinds import Kind
from gang.shapes import JobTemplate
from workloads.batch.adapter import job_created_pods

GROUP = "jobset.x-k8s.io"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
STAMP = "jobset.sigs.k8s.io"  # the prefix of the keys the controller stamps on Jobs and pods


class _ReplicatedJobShape(TypedDict, total=False):
    name: Any
    replicas: Any
    dependsOn: Any
    template: JobTemplate


class _JobSetShape(TypedDict, total=False):
    replicatedJobs: list[_ReplicatedJobShape]
    startupPolicy: Any


def _replicated_jobs(jobset_spec: Obj) -> list[Obj]:
    return [mapping(r) for r in jobset_spec.get("replicatedJobs") or [] if isinstance(r, dict)]


def _pods(replicated_job: Obj) -> int:
    job_spec = spec(mapping(replicated_job.get("template")))
    return as_int(replicated_job.get("replicas"), 1) * job_pods(job_spec)


def _later(jobset_spec: Obj) -> list[Obj]:
    jobs = _replicated_jobs(jobset_spec)
    in_order = mapping(jobset_spec.get("startupPolicy")).get("startupPolicyOrder") == "InOrder"
    return [r for i, r in enumerate(jobs) if r.get("dependsOn") or (in_order and i > 0)]


def jobset_pod_count(jobset_spec: Obj) -> int:
    return sum(_pods(r) for r in _replicated_jobs(jobset_spec))


def jobset_membership(pod: Obj, chain: Chain, jobset: Obj, group: str) -> Membership:
    jobset_spec = spec(jobset)
    job = chain.find("batch", "Job")
    labels = {**labels_of(job), **labels_of(pod)}
    replicated = labels.get(REPLICATED_JOB_LABEL)
    if replicated is None:
        return not_member(f"pod carries no {REPLICATED_JOB_LABEL} label")
    attempt = as_int(labels.get(RESTART_ATTEMPT_LABEL), 0)
    if attempt:
        group = f"{group}-r{attempt}"
    size = jobset_pod_count(jobset_spec)
    later = _later(jobset_spec)
    if any(r.get("name") == replicated for r in later):
        return Membership(True, f"replicated job {replicated} starts later", group, size, late=True)
    expected = tuple(
        expected_from_template(str(r.get("name")), _pods(r), spec(mapping(r.get("template"))).get("template"),
                               per_child=job_pods(spec(mapping(r.get("template")))))
        for r in later
    )
    reason = f"replicated job {replicated}: first stage" + (f", {len(later)} later stage(s)" if later else "")
    return Membership(True, reason, group, size, expected=expected)


def stage_jobs(jobset: Obj) -> list[Obj]:
    """The Jobs of the first stage, as the JobSet controller stamps them: ``<jobset>-<replicated job>-<index>``,
    labelled and annotated with the JobSet's keys (Job and pod template alike), Indexed and restartPolicy OnFailure
    unless set (JobSet's webhook defaults), DNS hostnames on, suspended with the JobSet. Each has a uid of its own
    (the root's and its name) for its pods' owner references."""
    jobset_spec, meta = spec(jobset), mapping(jobset.get("metadata"))
    replicated, later = _replicated_jobs(jobset_spec), _later(jobset_spec)
    total = sum(as_int(r.get("replicas"), 1) for r in replicated)
    network = mapping(jobset_spec.get("network"))
    jobs, offset = [], 0
    for rjob in replicated:
        replicas = as_int(rjob.get("replicas"), 1)
        for index in range(replicas) if rjob not in later else ():
            name = f"{name_of(jobset)}-{rjob.get('name')}-{index}"
            stamp = {f"{STAMP}/jobset-name": name_of(jobset), f"{STAMP}/replicatedjob-name": str(rjob.get("name")),
                     RESTART_ATTEMPT_LABEL: str(as_int(mapping(jobset.get("status")).get("restarts"), 0)),
                     f"{STAMP}/replicatedjob-replicas": str(replicas), f"{STAMP}/global-replicas": str(total),
                     JOB_INDEX_LABEL: str(index),
                     f"{STAMP}/job-key": hashlib.sha1(f"{meta.get('namespace')}/{name}".encode()).hexdigest(),
                     f"{STAMP}/job-global-index": str(offset + index)}
            template = copy.deepcopy(mapping(rjob.get("template")))
            job_spec = template.setdefault("spec", {})
            job_spec.setdefault("completionMode", "Indexed")
            pod_template = job_spec.setdefault("template", {})
            for target in (template.setdefault("metadata", {}), pod_template.setdefault("metadata", {})):
                target["labels"] = {**mapping(target.get("labels")), **stamp}
                target["annotations"] = {**mapping(target.get("annotations")), **stamp}
            pod_spec = pod_template.setdefault("spec", {})
            pod_spec.setdefault("restartPolicy", "OnFailure")
            if network.get("enableDNSHostnames", True):
                pod_spec["subdomain"] = network.get("subdomain") or name_of(jobset)
            job_spec["suspend"] = jobset_spec.get("suspend") is True
            jobs.append({"apiVersion": "batch/v1", "kind": "Job",
                         "metadata": {"name": name, "uid": f"{meta.get('uid')}-{name}",
                                      "labels": template["metadata"]["labels"],
                                      "annotations": template["metadata"]["annotations"],
                                      "ownerReferences": [controller_ref(jobset)]},
                         "spec": job_spec})
        offset += replicas
    return jobs


class JobSetAdapter(WorkloadAdapter):
    kind = Kind(GROUP, "JobSet", "jobsets")
    spec_shape = _JobSetShape
    role_label = REPLICATED_JOB_LABEL  # a replicated job's name (the role of its expected members)
    child_labels = (REPLICATED_JOB_LABEL, JOB_INDEX_LABEL)  # one child Job: <replicated job>-<index>

    def roles(self, root: Obj) -> frozenset[str] | None:
        """The replicated jobs' names."""
        jobs = spec(root).get("replicatedJobs")
        return frozenset(str(mapping(job).get("name")) for job in jobs if mapping(job).get("name")) \
            if isinstance(jobs, list) else frozenset()

    def created(self, root: Obj) -> list[Obj] | None:
        """The first stage's Jobs, then their pods."""
        jobs = stage_jobs(root)
        return [*jobs, *(pod for job in jobs for pod in job_created_pods(job))]

    def pod_count(self, root: Obj) -> int | None:
        return jobset_pod_count(spec(root))

    def membership(self, pod: Obj, chain: Chain) -> Membership:
        return jobset_membership(pod, chain, chain.root, name_of(chain.root))


ADAPTERS: tuple[WorkloadAdapter, ...] = (JobSetAdapter(),)
