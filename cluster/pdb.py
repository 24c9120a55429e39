"""PodDisruptionBudgets as their three readers see them: the disruption controller (``cluster/disruption.py``), the
eviction subresource (``cluster/eviction.py``) and the scheduler's preemption (``cluster/preemption.py``).

- Which pods a budget covers: pods of its namespace its ``spec.selector`` matches; a nil selector matches nothing,
  an empty one every pod (policy/v1; ``GetPodPodDisruptionBudgets`` in
  ``pkg/client/listers/policy/v1/poddisruptionbudget_expansion.go``, ``getPodDisruptionBudgets`` in
  ``pkg/registry/core/pod/storage/eviction.go``); an invalid selector matches nothing. Preemption alone also
  ignores an empty selector (``filterPodsWithPDBViolation``: "A PDB with a nil or empty selector matches nothing").
- Healthy is ``IsPodReady``: the pod's Ready condition is True (``pkg/api/v1/pod/util.go``).
- The ``DisruptionAllowed`` condition follows ``disruptionsAllowed`` (``UpdateDisruptionAllowedCondition`` in
  ``k8s.io/component-helpers/apps/poddisruptionbudget/helpers.go``), set as ``meta.SetStatusCondition`` does: the
  transition time moves only when the status does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cluster.selectors import SelectorError, selector_from_dict
from cluster.store import Obj, now

DISRUPTION_ALLOWED = "DisruptionAllowed"
SUFFICIENT_PODS, INSUFFICIENT_PODS, SYNC_FAILED = "SufficientPods", "InsufficientPods", "SyncFailed"


def selects(pdb: Mapping[str, Any], pod: Mapping[str, Any], empty_matches: bool = True) -> bool:
    """Whether ``pdb`` covers ``pod`` (``empty_matches=False``: preemption's reading of an empty selector)."""
    if (pdb.get("metadata") or {}).get("namespace") != (pod.get("metadata") or {}).get("namespace"):
        return False
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None or (not selector and not empty_matches):
        return False
    try:
        return selector_from_dict(selector).matches((pod.get("metadata") or {}).get("labels") or {})
    except SelectorError:
        return False


def is_pod_ready(pod: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def set_condition(conditions: list[Obj] | None, type_: str, status: str, reason: str, message: str,
                  observed_generation: int) -> list[Obj]:
    """``meta.SetStatusCondition``: a new list, ``type_`` replaced; its lastTransitionTime kept unless the status
    changes."""
    current = next((c for c in conditions or [] if c.get("type") == type_), None)
    stamp = current["lastTransitionTime"] if current and current.get("status") == status else now()
    new = {"type": type_, "status": status, "observedGeneration": observed_generation, "lastTransitionTime": stamp,
           "reason": reason, "message": message}
    return [c if c.get("type") != type_ else new for c in conditions or []] + ([] if current else [new])


def with_disruption_allowed(status: dict[str, Any]) -> dict[str, Any]:
    """``UpdateDisruptionAllowedCondition``: True (SufficientPods) while disruptions are allowed, else False
    (InsufficientPods), at the status's observedGeneration."""
    allowed = (status.get("disruptionsAllowed") or 0) > 0
    return {**status, "conditions": set_condition(
        status.get("conditions"), DISRUPTION_ALLOWED, "True" if allowed else "False",
        SUFFICIENT_PODS if allowed else INSUFFICIENT_PODS, "", status.get("observedGeneration") or 0)}
