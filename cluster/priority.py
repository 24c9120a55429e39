"""Pod priority in the apiserver: the PriorityClasses every cluster has, and the Priority admission plugin.

- ``system-cluster-critical`` (2000000000) and ``system-node-critical`` (2000001000) are created at start
  (``pkg/apis/scheduling/types.go``, ``helpers.go``; the scheduling storage's ``AddSystemPriorityClasses``
  post-start hook) and cannot be deleted (``pkg/registry/scheduling/priorityclass/storage/storage.go``).
- The Priority plugin (``plugin/pkg/admission/priority/admission.go``), mutating and validating, runs among the
  built-in plugins before the admission webhooks (``pkg/kubeapiserver/options/plugins.go``: Priority precedes
  MutatingAdmissionWebhook, ValidatingAdmissionPolicy and ValidatingAdmissionWebhook). On a pod's CREATE it
  resolves ``spec.priorityClassName`` (none: the globalDefault class, the lowest-valued one should several be
  marked, else priority 0 and PreemptLowerPriority) into ``spec.priority`` and ``spec.preemptionPolicy``,
  refusing an unknown class and a ``spec.priority`` or ``spec.preemptionPolicy`` that disagrees with the class
  (403). On a pod's UPDATE it keeps the stored priority and preemptionPolicy when the new object omits them.
  On a PriorityClass's CREATE and UPDATE it refuses a second globalDefault class (403). Subresources are ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cluster.admission import Request
from cluster.store import ApiError, Obj

SYSTEM_PRIORITY_CLASS_PREFIX = "system-"
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_CRITICAL_PRIORITY = 2 * HIGHEST_USER_DEFINABLE_PRIORITY
PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER = "PreemptLowerPriority", "Never"
#: name -> (value, description): the system classes (never globalDefault)
SYSTEM_PRIORITY_CLASSES: dict[str, tuple[int, str]] = {
    "system-node-critical": (SYSTEM_CRITICAL_PRIORITY + 1000,
                             "Used for system critical pods that must not be moved from their current node."),
    "system-cluster-critical": (SYSTEM_CRITICAL_PRIORITY, "Used for system critical pods that must run in the "
                                                          "cluster, but can be moved to another node if necessary."),
}
#: the group and plural the plugin watches, and whose system objects the storage protects
GROUP, PLURAL = "scheduling.k8s.io", "priorityclasses"


def system_priority_classes() -> list[Obj]:
    """The system classes as the post-start hook creates them (then defaulted: PreemptLowerPriority)."""
    return [{"apiVersion": f"{GROUP}/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value,
             "globalDefault": False, "description": description, "preemptionPolicy": PREEMPT_LOWER_PRIORITY}
            for name, (value, description) in SYSTEM_PRIORITY_CLASSES.items()]


def _is_priority_class(request: Request) -> bool:
    return (request.resource.group, request.resource.plural) == (GROUP, PLURAL)


def _is_pod(request: Request) -> bool:
    return (request.resource.group, request.resource.plural) == ("", "pods")


def _forbidden(request: Request, obj: Obj, why: str) -> ApiError:
    """``admission.NewForbidden``: the object's name, else its generateName, else "Unknown"."""
    meta = obj.get("metadata") or {}
    name = request.name or meta.get("name") or meta.get("generateName") or "Unknown"
    resource = request.resource
    qualified = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
    return ApiError(403, "Forbidden", f'{qualified} "{name}" is forbidden: {why}',
                    {"name": name, "group": resource.group, "kind": resource.plural})


def default_class(classes: list[Obj]) -> Obj | None:
    """``getDefaultPriorityClass``: the globalDefault class; of several (a race), the lowest-valued."""
    defaults = [c for c in classes if c.get("globalDefault")]
    return min(defaults, key=lambda c: c.get("value") or 0) if defaults else None


def admit(request: Request, classes: Callable[[], list[Obj]]) -> None:
    """The plugin's ``Admit``: resolves the priority of the pod under admission, in place (``classes`` read only
    for pods)."""
    pod = request.obj
    if pod is None or request.subresource or not _is_pod(request) or request.operation not in ("CREATE", "UPDATE"):
        return
    spec: dict[str, Any] = pod.setdefault("spec", {})
    if request.operation == "UPDATE":
        old = (request.old or {}).get("spec") or {}
        for key in ("priority", "preemptionPolicy"):
            if spec.get(key) is None and old.get(key) is not None:
                spec[key] = old[key]
        return
    name = spec.get("priorityClassName") or ""
    priority: int = 0
    policy: str | None = PREEMPT_LOWER_PRIORITY
    if not name:
        chosen = default_class(classes())
        if chosen is not None:
            priority, policy = chosen.get("value") or 0, chosen.get("preemptionPolicy")
            spec["priorityClassName"] = chosen["metadata"]["name"]
    else:
        found = next((c for c in classes() if c["metadata"]["name"] == name), None)
        if found is None:
            raise _forbidden(request, pod, f"no PriorityClass with name {name} was found")
        priority, policy = found.get("value") or 0, found.get("preemptionPolicy")
    if spec.get("priority") is not None and spec["priority"] != priority:
        raise _forbidden(request, pod, f"the integer value of priority ({spec['priority']}) must not be provided in "
                                       f"pod spec; priority admission controller computed {priority} from the given "
                                       "PriorityClass name")
    spec["priority"] = priority
    if policy is not None:
        if spec.get("preemptionPolicy") is not None and spec["preemptionPolicy"] != policy:
            raise _forbidden(request, pod, f"the string value of PreemptionPolicy ({spec['preemptionPolicy']}) must "
                                           f"not be provided in pod spec; priority admission controller computed "
                                           f"{policy} from the given PriorityClass name")
        spec["preemptionPolicy"] = policy


def validate(request: Request, classes: Callable[[], list[Obj]]) -> None:
    """The plugin's ``Validate``: at most one globalDefault PriorityClass (updating the default itself is fine)."""
    obj = request.obj
    if obj is None or request.subresource or not _is_priority_class(request) or not obj.get("globalDefault") \
            or request.operation not in ("CREATE", "UPDATE"):
        return
    current = default_class(classes())
    if current is not None and (request.operation == "CREATE"
                                or current["metadata"]["name"] != (obj.get("metadata") or {}).get("name")):
        raise _forbidden(request, obj, f"PriorityClass {current['metadata']['name']} is already marked as default. "
                                       "Only one default can exist")


def refuse_system_deletion(name: str) -> None:
    """``REST.Delete`` of PriorityClasses: the system classes stay."""
    if name in SYSTEM_PRIORITY_CLASSES:
        raise ApiError(403, "Forbidden", f'{PLURAL}.{GROUP} "{name}" is forbidden: this is a system priority class '
                                         "and cannot be deleted", {"name": name, "group": GROUP, "kind": PLURAL})
