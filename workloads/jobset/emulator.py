"""JobSet controller (jobset.x-k8s.io/v1alpha2): Jobs ``<jobset>-<replicatedJob>-<jobIndex>`` per replicated job.

Each Job and its pod template carry the JobSet labels and annotations; the pods come from the Job
controller. A replicated job starts only when each ``dependsOn`` entry reached its status (Ready:
ready+succeeded+failed Jobs == replicas; Complete: succeeded == replicas), and under
``startupPolicyOrder: InOrder`` only after every earlier one is Ready. The defaults JobSet's own
webhook applies (Indexed completion, replicas 1, DNS hostnames) are applied here, as it is not run.

Failures (``executeFailurePolicy``): a child Job Failed (e.g. past its backoffLimit after deleted or rejected
pods) fails the JobSet without ``failurePolicy`` (``FailedJobs``: "jobset failed due to one or more job failures
(first failed job: <job>)"); with one, the JobSet restarts while ``restartsCountTowardsMax`` < ``maxRestarts``:
``status.restarts`` goes up, every Job of the previous attempt is deleted in the foreground and the Jobs are
created again (same names, once the old ones are gone) labelled with the new ``restart-attempt``; past
maxRestarts it fails (``ReachedMaxRestarts``). A finished JobSet deletes its active Jobs (foreground).
(``failurePolicy.rules`` and ``successPolicy`` are not emulated.)
"""

from __future__ import annotations

import copy
import hashlib

from cluster.operators.base import JOBS, Operator, labels, owner_ref, with_condition
from cluster.operators.job import job_finished
from cluster.store import Obj

JOBSETS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
P = "jobset.sigs.k8s.io"


def _job_ready(job: Obj) -> bool:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    pods = spec.get("parallelism", 1)
    if spec.get("completions") is not None:
        pods = min(pods, spec["completions"])
    return bool(status.get("succeeded", 0) + status.get("ready", 0) >= pods)


class JobSetController(Operator):
    root = JOBSETS
    identity = ("jobset-system", "jobset-controller-manager")

    def sync(self, js: Obj) -> None:
        spec, status = js.get("spec") or {}, js.get("status") or {}
        jobs = self.children(JOBS, js)
        if any(c.get("type") in ("Completed", "Failed") and c.get("status") == "True"
               for c in status.get("conditions") or []):
            for job in jobs:
                if not job_finished(job):
                    self.delete(JOBS, job, propagation="Foreground")
            return
        restarts = str(status.get("restarts", 0))
        current = [j for j in jobs if labels(j).get(f"{P}/restart-attempt") == restarts]
        for job in jobs:
            if labels(job).get(f"{P}/restart-attempt") != restarts:
                self.delete(JOBS, job, propagation="Foreground")
        counts = self._statuses(spec, current)
        rjobs = spec.get("replicatedJobs") or []
        in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
        conditions, update = status.get("conditions"), {}
        failed = sorted((j for j in current if job_finished(j) == "Failed"), key=lambda j: j["metadata"]["name"])
        if rjobs and all(counts[r["name"]]["succeeded"] == r.get("replicas", 1) for r in rjobs):
            conditions = with_condition(conditions, "Completed", "True", "AllJobsCompleted",
                                        "jobset completed successfully")
        elif failed:
            policy, first = spec.get("failurePolicy"), failed[0]["metadata"]["name"]
            counted = status.get("restartsCountTowardsMax", 0)
            if policy is None:
                conditions = with_condition(conditions, "Failed", "True", "FailedJobs",
                                            f"jobset failed due to one or more job failures (first failed job: "
                                            f"{first})")
            elif counted >= policy.get("maxRestarts", 0):
                conditions = with_condition(conditions, "Failed", "True", "ReachedMaxRestarts",
                                            f"jobset failed due to reaching max number of restarts (first failed "
                                            f"job: {first})")
            else:
                update = {"restarts": int(restarts) + 1, "restartsCountTowardsMax": counted + 1}
        else:
            existing = {j["metadata"]["name"] for j in jobs}  # an old attempt's Job still holds its name
            conditions = self._start(js, rjobs, counts, existing, in_order, conditions)
        self.patch_status(JOBSETS, js, {"replicatedJobsStatus": [{"name": name, **c} for name, c in counts.items()],
                                        "restarts": int(restarts), "conditions": conditions, **update})

    @staticmethod
    def _statuses(spec: Obj, jobs: list[Obj]) -> dict[str, dict[str, int]]:
        counts = {r["name"]: {"ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
                  for r in spec.get("replicatedJobs") or []}
        for job in jobs:
            c = counts.get((job["metadata"].get("labels") or {}).get(f"{P}/replicatedjob-name", ""))
            if c is None:
                continue
            finished = job_finished(job)
            if finished:
                c["succeeded" if finished == "Complete" else "failed"] += 1
                continue
            c["ready"] += _job_ready(job)
            c["active"] += (job.get("status") or {}).get("active", 0) > 0
            c["suspended"] += bool((job.get("spec") or {}).get("suspend"))
        return counts

    def _start(self, js: Obj, rjobs: list[Obj], counts: dict[str, dict[str, int]], existing: set[str],
               in_order: bool, conditions: list[Obj] | None) -> list[Obj] | None:
        """reconcileReplicatedJobs: create the Jobs of every replicated job whose turn has come."""
        for rjob in rjobs:
            replicas = rjob.get("replicas", 1)
            if not all(self._reached(d, rjobs, counts) for d in rjob.get("dependsOn") or []):
                continue
            c = counts[rjob["name"]]
            if in_order and c["ready"] + c["succeeded"] + c["failed"] == replicas:
                continue
            for index in range(replicas):
                name = f"{js['metadata']['name']}-{rjob['name']}-{index}"
                if name not in existing:
                    self.create(JOBS, js, self._job(js, rjobs, rjob, index, name))
            if in_order:
                return with_condition(conditions, "StartupPolicyCompleted", "False", "StartupPolicyInOrder",
                                      "startup policy in order starting")
        if in_order:
            return with_condition(conditions, "StartupPolicyCompleted", "True", "StartupPolicyInOrder",
                                  "all replicated jobs have started")
        return conditions

    @staticmethod
    def _reached(dependency: Obj, rjobs: list[Obj], counts: dict[str, dict[str, int]]) -> bool:
        target = next((r for r in rjobs if r["name"] == dependency.get("name")), None)
        if target is None:
            return False
        replicas, c = target.get("replicas", 1), counts[target["name"]]
        if dependency.get("status") == "Complete":
            return bool(c["succeeded"] == replicas)
        return bool(c["ready"] + c["succeeded"] + c["failed"] == replicas)

    @staticmethod
    def _job(js: Obj, rjobs: list[Obj], rjob: Obj, index: int, name: str) -> Obj:
        meta, status = js["metadata"], js.get("status") or {}
        offset = 0
        for other in rjobs:
            if other["name"] == rjob["name"]:
                break
            offset += other.get("replicas", 1)
        stamp = {f"{P}/jobset-name": meta["name"], f"{P}/replicatedjob-name": rjob["name"],
                 f"{P}/restart-attempt": str(status.get("restarts", 0)),
                 f"{P}/replicatedjob-replicas": str(rjob.get("replicas", 1)),
                 f"{P}/global-replicas": str(sum(r.get("replicas", 1) for r in rjobs)),
                 f"{P}/job-index": str(index),
                 f"{P}/job-key": hashlib.sha1(f"{meta['namespace']}/{name}".encode()).hexdigest(),
                 f"{P}/job-global-index": str(offset + index)}
        template = copy.deepcopy(rjob.get("template") or {})
        job_spec = template.get("spec") or {}
        job_spec.setdefault("completionMode", "Indexed")
        pod_template = job_spec.setdefault("template", {})
        for target in (template.setdefault("metadata", {}), pod_template.setdefault("metadata", {})):
            target["labels"] = {**(target.get("labels") or {}), **stamp}
            target["annotations"] = {**(target.get("annotations") or {}), **stamp}
        pod_spec = pod_template.setdefault("spec", {})
        pod_spec.setdefault("restartPolicy", "OnFailure")
        if ((js["spec"].get("network") or {}).get("enableDNSHostnames", True)):
            pod_spec["subdomain"] = (js["spec"].get("network") or {}).get("subdomain") or meta["name"]
        job_spec["suspend"] = bool(js["spec"].get("suspend"))
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "labels": template["metadata"]["labels"],
                             "annotations": template["metadata"]["annotations"], "ownerReferences": [owner_ref(js)]},
                "spec": job_spec}


OPERATORS: dict[str, type[Operator]] = {"jobset-controller": JobSetController}
