"""The ``pods/eviction`` subresource's rules (``pkg/registry/core/pod/storage/eviction.go``); ``ApiServer._evict``
carries them out against the store.

POST a policy/v1 ``Eviction`` (its ``metadata.name`` the pod's, its ``deleteOptions`` those of the deletion):

- A pod that is Pending, Succeeded, Failed or already being deleted is deleted without looking at budgets
  (``canIgnorePDB``; a Pending pod's deletion carries its resourceVersion as precondition, so that it cannot race
  its becoming Running).
- Otherwise the budgets covering the pod decide (``cluster/pdb.py``: nil selector none, empty selector all): more
  than one is an error (500: "This pod has more than one PodDisruptionBudget, which the eviction subresource does
  not support."); a pod that is not Ready goes without using the budget when ``unhealthyPodEvictionPolicy`` is
  AlwaysAllow or the budget is met (currentHealthy >= desiredHealthy > 0), with its resourceVersion as
  precondition; else the budget must allow a disruption: 429 TooManyRequests with a ``DisruptionBudget`` cause
  while the disruption controller has not observed the budget's generation (retry after 10 s) or when
  ``disruptionsAllowed`` is 0; 403 when it is negative or when ``disruptedPods`` holds more than 2,000 pods. A
  granted eviction decrements ``disruptionsAllowed`` and records the pod in ``disruptedPods`` (a status update that
  retries on conflict from the fresh budget), then deletes.
- The deletion first sets the pod's ``DisruptionTarget`` condition (``EvictionByEvictionAPI``), as the status
  storage does (no admission), then deletes through the storage with the eviction's deleteOptions (the pod's own
  grace period unless they set one; no DELETE admission either). Success is 201 with a Success Status. A dry run
  checks everything and changes nothing.

Upstream the multiple-budgets Status is the create's result (written with 201; clients such as client-go read its
code, 500, and fail); here it is an HTTP 500, as the documentation describes it. No ``Retry-After`` header is sent.
"""

from __future__ import annotations

from cluster.pdb import is_pod_ready, selects, with_disruption_allowed
from cluster.store import ApiError, Obj, now

MAX_DISRUPTED_POD_SIZE = 2000
RETRIES = 20  # EvictionsRetry.Steps (the emulator retries at once)
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE_BUDGETS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
SUCCESS: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
DISRUPTION_TARGET = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                     "message": "Eviction API: evicting"}


def can_ignore_pdb(pod: Obj) -> bool:
    """``canIgnorePDB``: a pod that is not running (yet, or any more) disrupts nothing."""
    phase = (pod.get("status") or {}).get("phase", "Pending")
    return phase in ("Succeeded", "Failed", "Pending") or bool(pod["metadata"].get("deletionTimestamp"))


def should_enforce_resource_version(pod: Obj) -> bool:
    """``shouldEnforceResourceVersion``: a pod that is neither finished nor being deleted might become Ready."""
    phase = (pod.get("status") or {}).get("phase", "Pending")
    return phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def budgets(pod: Obj, pdbs: list[Obj]) -> list[Obj]:
    """``getPodDisruptionBudgets``: the budgets covering the pod."""
    return [pdb for pdb in pdbs if selects(pdb, pod)]


def unhealthy_may_go(pod: Obj, pdb: Obj) -> bool:
    """A pod that is not Ready is evicted without using the budget (``unhealthyPodEvictionPolicy``)."""
    if is_pod_ready(pod):
        return False
    if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    status = pdb.get("status") or {}
    return (status.get("currentHealthy") or 0) >= (status.get("desiredHealthy") or 0) > 0


def too_many_requests(cause: str, retry_after: int) -> ApiError:
    """``errors.NewTooManyRequests`` with a ``DisruptionBudget`` cause (``retryAfterSeconds`` is omitempty)."""
    details: Obj = {"retryAfterSeconds": retry_after} if retry_after else {}
    return ApiError(429, "TooManyRequests", VIOLATION,
                    {**details, "causes": [{"reason": "DisruptionBudget", "message": cause}]})


def still_processing(name: str) -> ApiError:
    """``createTooManyRequestsError``: the budget's status is not current yet."""
    return too_many_requests(f"The disruption budget {name} is still being processed by the server.", 10)


def _forbidden(name: str, why: str) -> ApiError:
    return ApiError(403, "Forbidden", f'poddisruptionbudget.policy "{name}" is forbidden: {why}',
                    {"name": name, "group": "policy", "kind": "poddisruptionbudget"})


def decremented(pdb: Obj, pod_name: str, dry_run: bool) -> Obj:
    """``checkAndDecrement``: the budget's status with one disruption used and the pod recorded (not recorded in a
    dry run), or the refusal."""
    status = dict(pdb.get("status") or {})
    name = pdb["metadata"]["name"]
    if (status.get("observedGeneration") or 0) < pdb["metadata"].get("generation", 1):
        raise still_processing(name)
    allowed = status.get("disruptionsAllowed") or 0
    if allowed < 0:
        raise _forbidden(name, "pdb disruptions allowed is negative")
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_POD_SIZE:
        raise _forbidden(name, "DisruptedPods map too big - too many evictions not confirmed by PDB controller")
    if allowed == 0:
        raise too_many_requests(f"The disruption budget {name} needs {status.get('desiredHealthy') or 0} healthy "
                                f"pods and has {status.get('currentHealthy') or 0} currently", 0)
    status["disruptionsAllowed"] = allowed - 1
    if allowed == 1:
        status = with_disruption_allowed(status)
    if not dry_run:
        status["disruptedPods"] = {**(status.get("disruptedPods") or {}), pod_name: now()}
    return status


def with_disruption_target(pod: Obj) -> Obj:
    """The pod with ``DisruptionTarget`` True (``podutil.UpdatePodCondition``: the transition time kept when the
    status does not change)."""
    conditions = list((pod.get("status") or {}).get("conditions") or [])
    old = next((c for c in conditions if c.get("type") == DISRUPTION_TARGET["type"]), None)
    stamp = old.get("lastTransitionTime") if old and old.get("status") == "True" else now()
    new = {**DISRUPTION_TARGET, "lastProbeTime": None, "lastTransitionTime": stamp}
    conditions = [new if c is old else c for c in conditions] if old else [*conditions, new]
    return {**pod, "status": {**(pod.get("status") or {}), "conditions": conditions}}
