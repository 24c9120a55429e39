"""kube-controller-manager's Job controller (1.31 defaults), for every batch/v1 Job (user, JobSet, mpi-operator,
RayJob).

- Pods: min(parallelism, remaining completions) active, named by ``generateName`` only (``<job>-`` or, Indexed,
  ``<job>-<index>-``), so webhooks see no pod name at admission; each carries the ``batch.kubernetes.io/job-tracking``
  finalizer, so the controller sees every pod end before the pod goes.
- Finished pods are counted through ``status.uncountedTerminatedPods`` (record the uid, remove the finalizer, then
  count it), as the controller tracks them since pod-finalizer tracking went GA. A pod is failed when it is Failed
  or, with the default ``podReplacementPolicy: TerminatingOrFailed``, when it was deleted before it succeeded
  (``isPodFailed``: a pending, gated, running or kubelet-rejected pod deleted by anyone counts toward
  ``backoffLimit``). A deleted pod is no longer active, so its replacement is created while the limit allows...
- ...after the pod failure back-off (``DefaultJobPodFailureBackOff`` 10 s, doubled per failure since the last
  success, at most 6 min, from the last failure): deleting 4 pods at once delays the replacements by 80 s.
- More than ``backoffLimit`` failures: condition FailureTarget (``BackoffLimitExceeded``), active pods deleted,
  then Failed once none is left and every finished pod is counted; completions reached: SuccessCriteriaMet,
  then Complete. ``suspend`` deletes the active pods.
- ``podFailurePolicy`` (``pod_failure_policy.go``; validated in ``cluster/validation/job.py``, which requires
  ``restartPolicy: Never``, and defaulting ``podReplacementPolicy: Failed``): a pod then fails only when its phase is
  Failed (``onlyReplaceFailedPods``: a deleted pod is not counted, nor replaced, while it terminates; the kubelet,
  or PodGC for an unscheduled one, ends it Failed), and each failed pod is matched against the rules in order,
  ``onExitCodes`` (the first terminated container, then init container, with a non-zero exit code) or
  ``onPodConditions`` (type and status): ``Ignore`` does not count it toward ``backoffLimit`` (its finalizer goes, it
  is replaced, and, as upstream, the failure back-off still counts it), ``Count`` (or no match) counts it,
  ``FailJob`` fails the Job (FailureTarget then Failed, reason ``PodFailurePolicy``, the rule's message), and
  ``FailIndex`` counts it (``backoffLimitPerIndex``, which it needs, is not emulated). Once a Job is failing, a pod
  being deleted counts as failed (as upstream treats every pod of a finished Job).
  (backoffLimitPerIndex, successPolicy and activeDeadlineSeconds are not emulated.)
"""

from __future__ import annotations

import contextlib
import time

from cluster.apiserver import ApiServer
from cluster.operators.base import (
    JOBS,
    PODS,
    Operator,
    controller_of,
    owner_ref,
    phase,
    pod_from_template,
    pod_ready,
    url,
    with_condition,
)
from cluster.store import ApiError, Obj, now

INDEX = "batch.kubernetes.io/job-completion-index"
TRACKING = "batch.kubernetes.io/job-tracking"
BACKOFF_SECONDS, MAX_BACKOFF_SECONDS = 10.0, 360.0
BACKOFF_LIMIT_MESSAGE = "Job has reached the specified backoff limit"


def _index(pod: Obj) -> int | None:
    value = ((pod["metadata"].get("annotations") or {}).get(INDEX)
             or (pod["metadata"].get("labels") or {}).get(INDEX))
    return int(value) if value is not None and str(value).isdigit() else None


def _condition(job: Obj, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def job_finished(job: Obj) -> str:
    """"Complete" or "Failed" once the Job carries that condition, else ""."""
    return next((t for t in ("Complete", "Failed") if _condition(job, t)), "")


def only_replace_failed(job: Obj) -> bool:
    """``onlyReplaceFailedPods``: podReplacementPolicy Failed, or a podFailurePolicy."""
    spec = job.get("spec") or {}
    return spec.get("podReplacementPolicy") == "Failed" or spec.get("podFailurePolicy") is not None


def pod_failed(pod: Obj, job: Obj) -> bool:
    """``isPodFailed``: Failed; or, unless only failed pods are replaced, deleted before it succeeded."""
    if phase(pod) == "Failed":
        return True
    if only_replace_failed(job):
        return False
    return bool(pod["metadata"].get("deletionTimestamp")) and phase(pod) != "Succeeded"


def _exit_code_match(pod: Obj, requirement: Obj) -> Obj | None:
    """``matchOnExitCodes``: the first terminated container (then init container) with a non-zero exit code the
    requirement matches."""
    status, name, values = pod.get("status") or {}, requirement.get("containerName"), requirement.get("values") or []
    for key in ("containerStatuses", "initContainerStatuses"):
        for container in status.get(key) or []:
            code = ((container.get("state") or {}).get("terminated") or {}).get("exitCode")
            if code is None or code == 0 or (name is not None and name != container.get("name")):
                continue
            if (code in values) == (requirement.get("operator") == "In") and requirement.get("operator") in (
                    "In", "NotIn"):
                return {"name": container.get("name"), "exitCode": code}
    return None


def match_pod_failure_policy(policy: Obj | None, pod: Obj) -> tuple[str | None, bool, str | None]:
    """``matchPodFailurePolicy``: (the FailJob message, whether the failure counts toward backoffLimit, the action
    of the first matching rule)."""
    meta = pod["metadata"]
    for index, rule in enumerate((policy or {}).get("rules") or []):
        action = rule.get("action")
        if rule.get("onExitCodes") is not None:
            container = _exit_code_match(pod, rule["onExitCodes"])
            if container is None:
                continue
            message = (f"Container {container['name']} for pod {meta['namespace']}/{meta['name']} failed with exit "
                       f"code {container['exitCode']} matching {action} rule at index {index}")
        else:
            patterns = rule.get("onPodConditions") or []
            condition = next((c for c in (pod.get("status") or {}).get("conditions") or [] for p in patterns
                              if c.get("type") == p.get("type") and c.get("status") == p.get("status")), None)
            if condition is None:
                continue
            message = (f"Pod {meta['namespace']}/{meta['name']} has condition {condition['type']} matching {action} "
                       f"rule at index {index}")
        if action in ("Ignore", "Count", "FailIndex", "FailJob"):
            return (message if action == "FailJob" else None), action != "Ignore", action
    return None, True, None


def _ranges(indexes: set[int]) -> str:
    """status.completedIndexes: "1,3-5,7"."""
    parts, ordered = [], sorted(indexes)
    while ordered:
        start = end = ordered.pop(0)
        while ordered and ordered[0] == end + 1:
            end = ordered.pop(0)
        parts.append(str(start) if start == end else f"{start}-{end}")
    return ",".join(parts)


def _parse_ranges(text: str) -> set[int]:
    found: set[int] = set()
    for part in filter(None, (text or "").split(",")):
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


class JobController(Operator):
    root = JOBS
    identity = ("kube-system", "job-controller")

    def __init__(self, api: ApiServer) -> None:
        super().__init__(api)
        self._backoff: dict[str, tuple[int, float]] = {}  # job uid -> (failures after last success, last failure)

    def roots(self) -> list[Obj]:
        """Every Job, those being deleted too: their pods are still counted and released (a Job deleted in the
        foreground waits for pods that only the released finalizer lets go)."""
        return self.items(JOBS)

    def reconcile(self) -> None:
        super().reconcile()
        self._release_orphans()

    def _release_orphans(self) -> None:
        """``syncOrphanPod``: a tracked pod whose controller is not a batch/v1 Job keeps its finalizer; one whose Job
        is gone (by uid) or finished, or that has no controller any more (orphaned), loses it."""
        jobs = {j["metadata"]["uid"]: j for j in self.items(JOBS)}
        for pod in self.items(PODS):
            if TRACKING not in (pod["metadata"].get("finalizers") or []):
                continue
            ref = controller_of(pod)
            if ref is not None and (ref.get("kind") != "Job" or ref.get("apiVersion") != "batch/v1"):
                continue
            job = jobs.get(ref.get("uid", "")) if ref is not None else None
            if job is None or job_finished(job):
                self._release(pod)

    def sync(self, job: Obj) -> None:
        spec, status = job.get("spec") or {}, dict(job.get("status") or {})
        pods = self.children(PODS, job)
        tracked = [p for p in pods if TRACKING in (p["metadata"].get("finalizers") or [])]
        uncounted = status.get("uncountedTerminatedPods") or {}
        pending_ok, pending_failed = list(uncounted.get("succeeded") or []), list(uncounted.get("failed") or [])
        # 1. pods whose finalizer is gone are counted (and leave the uncounted lists)
        still = {p["metadata"]["uid"] for p in tracked}
        succeeded = status.get("succeeded", 0) + sum(u not in still for u in pending_ok)
        failed = status.get("failed", 0) + sum(u not in still for u in pending_failed)
        completed = _parse_ranges(status.get("completedIndexes", ""))
        by_uid = {p["metadata"]["uid"]: p for p in pods}
        for uid in pending_ok:
            if uid not in still and uid in by_uid and _index(by_uid[uid]) is not None:
                completed.add(_index(by_uid[uid]))  # type: ignore[arg-type]
        pending_ok = [u for u in pending_ok if u in still]
        pending_failed = [u for u in pending_failed if u in still]
        # 2. newly finished tracked pods are recorded (those a podFailurePolicy ignores are not), then released
        known = set(pending_ok) | set(pending_failed)
        policy, failing = spec.get("podFailurePolicy"), _condition(job, "FailureTarget")
        new_ok = [p for p in tracked if p["metadata"]["uid"] not in known and phase(p) == "Succeeded"]
        new_failed = [p for p in tracked if p["metadata"]["uid"] not in known and (pod_failed(p, job) or (
            failing and p["metadata"].get("deletionTimestamp") and phase(p) != "Succeeded"))]
        self._record_backoff(job, len(new_ok), len(new_failed))
        counted = [p for p in new_failed if match_pod_failure_policy(policy, p)[1]]
        ignored = [p for p in new_failed if p not in counted]
        pending_ok += [p["metadata"]["uid"] for p in new_ok]
        pending_failed += [p["metadata"]["uid"] for p in counted]
        for pod in new_ok:
            if _index(pod) is not None:
                completed.add(_index(pod))  # type: ignore[arg-type]
        active = [p for p in pods if not p["metadata"].get("deletionTimestamp") and phase(p) not in
                  ("Succeeded", "Failed")]
        terminating = [p for p in pods if p["metadata"].get("deletionTimestamp") and phase(p) not in
                       ("Succeeded", "Failed")]
        completions, parallelism = spec.get("completions"), spec.get("parallelism", 1)
        indexed = spec.get("completionMode") == "Indexed" and completions is not None
        done_count = len(completed) if indexed else succeeded + len(pending_ok)
        total_failed = failed + len(pending_failed)
        conditions = status.get("conditions")
        finished = job_finished(job)
        fail_job = next((m for p in pods if pod_failed(p, job) and (m := match_pod_failure_policy(policy, p)[0])), None)
        if not finished:
            if failing or fail_job or total_failed > spec.get("backoffLimit", 6):
                target = next((c for c in conditions or [] if c.get("type") == "FailureTarget"), None)
                reason, message = (target["reason"], target["message"]) if failing and target else \
                    ("PodFailurePolicy", fail_job) if fail_job else ("BackoffLimitExceeded", BACKOFF_LIMIT_MESSAGE)
                conditions = with_condition(conditions, "FailureTarget", "True", reason, message)
                self._delete_all(active)
                if not active and not terminating and not pending_ok and not pending_failed:
                    conditions = with_condition(conditions, "Failed", "True", reason, message)
            elif _condition(job, "SuccessCriteriaMet") or (done_count >= completions if completions is not None
                                                           else bool(done_count) and not active):
                conditions = with_condition(conditions, "SuccessCriteriaMet", "True", "CompletionsReached",
                                            "Reached expected number of succeeded pods")
                self._delete_all(active)
                if not active and not terminating and not pending_ok and not pending_failed:
                    conditions = with_condition(conditions, "Complete", "True", "CompletionsReached",
                                                "Reached expected number of succeeded pods")
                    status["completionTime"] = now()
            elif spec.get("suspend"):
                self._delete_all(active)
            elif not job["metadata"].get("deletionTimestamp") and self._backoff_over(job):
                wanted = (0 if done_count else parallelism) if completions is None \
                    else min(parallelism, completions - done_count)
                held = terminating if only_replace_failed(job) else []  # not replaced before they fail
                self._create_missing(job, active + held, completed if indexed else None, wanted)
        else:
            self._delete_all(active)
        # 3. release the recorded pods (their finalizers), now that their uids are in the status
        new_status: Obj = {"active": len(active), "ready": sum(pod_ready(p) for p in active),
                           "terminating": len(terminating), "succeeded": succeeded, "failed": failed,
                           "uncountedTerminatedPods": {"succeeded": pending_ok, "failed": pending_failed},
                           "startTime": status.get("startTime") or now(), "conditions": conditions}
        if indexed:
            new_status["completedIndexes"] = _ranges(completed)
        if status.get("completionTime"):
            new_status["completionTime"] = status["completionTime"]
        self.patch_status(JOBS, job, {k: v for k, v in new_status.items() if v is not None})
        for uid in pending_ok + pending_failed:
            self._release(by_uid[uid])
        for pod in ignored:
            self._release(pod)
        if job_finished(job) or finished:
            for pod in tracked:
                if phase(pod) in ("Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
                    self._release(pod)

    def _record_backoff(self, job: Obj, new_ok: int, new_failed: int) -> None:
        """``newBackoffRecord``: failures since the last success, and when the last one happened."""
        uid = job["metadata"]["uid"]
        failures, last = self._backoff.get(uid, (0, 0.0))
        if new_ok:
            failures = 0
        if new_failed:
            failures, last = failures + new_failed, time.monotonic()
        self._backoff[uid] = (failures, last)

    def _backoff_over(self, job: Obj) -> bool:
        failures, last = self._backoff.get(job["metadata"]["uid"], (0, 0.0))
        if not failures:
            return True
        delay = min(BACKOFF_SECONDS * 2 ** (failures - 1), MAX_BACKOFF_SECONDS)
        return time.monotonic() - last >= delay

    def _delete_all(self, pods: list[Obj]) -> None:
        for pod in pods:
            self.delete(PODS, pod)

    def _release(self, pod: Obj) -> None:
        meta = pod["metadata"]
        if TRACKING not in (meta.get("finalizers") or []):
            return
        kept = [f for f in meta["finalizers"] if f != TRACKING]
        with contextlib.suppress(ApiError):  # gone or changed: the next pass sees it
            self.client.patch(url(PODS, meta["namespace"], meta["name"]),
                              {"metadata": {"finalizers": kept or None, "resourceVersion": meta["resourceVersion"]}})

    def _create_missing(self, job: Obj, active: list[Obj], completed: set[int] | None, wanted: int) -> None:
        missing = wanted - len(active)
        if missing <= 0:
            return
        if completed is not None:
            busy = completed | {_index(p) for p in active}
            for index in [i for i in range(job["spec"]["completions"]) if i not in busy][:missing]:
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
        pod["metadata"]["finalizers"] = [*pod["metadata"].get("finalizers", []), TRACKING]
        if index is not None:
            pod["spec"]["hostname"] = f"{name}-{index}"
            env = {"name": "JOB_COMPLETION_INDEX",
                   "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{INDEX}']"}}}
            for key in ("initContainers", "containers"):
                for container in pod["spec"].get(key) or []:
                    container.setdefault("env", []).append(dict(env))
        return pod
