"""DELETE as the apiserver's generic registry decides it: DeleteOptions, graceful deletion, cascading finalizers.

- ``DeleteOptions`` come from the body, or from the query when there is no body (``handlers/delete.go``), and are
  validated like ``ValidateDeleteOptions`` (422 on an unknown ``propagationPolicy`` or on both it and the
  deprecated ``orphanDependents``).
- Pods are deleted gracefully (``podStrategy.CheckGracefulDelete``): the grace period is the request's, else the
  pod's ``terminationGracePeriodSeconds``; 0 for a pod that is not bound or already Succeeded/Failed. The pod then
  carries ``deletionTimestamp`` = now + grace until its kubelet confirms with a DELETE of grace 0. Other resources
  are never graceful.
- ``deletionFinalizersForGarbageCollection``: Orphan adds the ``orphan`` finalizer, Foreground
  ``foregroundDeletion``; Background neither. Without a policy the object's own such finalizer decides, else the
  resource's default: ``OrphanDependents`` for batch/v1 Jobs (kept for compatibility, with the warning the Job
  REST storage adds), ``DeleteDependents`` (background) for everything else served here. The garbage collector
  (``cluster/gc.py``) acts on these finalizers and on dependents whose owners are gone.
"""

from __future__ import annotations

from typing import Any

from cluster.resources import Resource
from cluster.store import ApiError, Obj
from cluster.validation.errors import causes, invalid, invalid_message, not_supported

ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
POLICIES = ("Foreground", "Background", "Orphan")
JOB_DELETE_WARNING = ("child pods are preserved by default when jobs are deleted; set propagationPolicy=Background "
                      "to remove them or set propagationPolicy=Orphan to suppress this warning")


def delete_options(body: Any, query: dict[str, str]) -> Obj:
    """The request's DeleteOptions, validated: the body when there is one (its query parameters are then ignored,
    as ``handlers/delete.go`` decodes one or the other), else the query parameters."""
    if body is not None:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request is not a DeleteOptions object")
        options = dict(body)
    else:
        options = {}
        for key in ("gracePeriodSeconds", "propagationPolicy", "orphanDependents"):
            if key in query:
                options[key] = query[key]
        if "orphanDependents" in options:
            options["orphanDependents"] = str(options["orphanDependents"]).lower() == "true"
    if options.get("gracePeriodSeconds") is not None:
        try:
            options["gracePeriodSeconds"] = int(options["gracePeriodSeconds"])
        except (TypeError, ValueError):
            value = options["gracePeriodSeconds"]
            raise ApiError(400, "BadRequest", f"invalid gracePeriodSeconds: {value!r}") from None
    errors = []
    policy = options.get("propagationPolicy")
    if policy is not None and options.get("orphanDependents") is not None:
        errors.append(invalid("propagationPolicy", policy, "orphanDependents and deletionPropagation cannot be both "
                                                           "set"))
    if policy is not None and policy not in POLICIES:
        errors.append(not_supported("propagationPolicy", policy, [*POLICIES, "nil"]))
    if errors:
        raise ApiError(422, "Invalid", invalid_message("DeleteOptions.meta.k8s.io", "", errors),
                       {"group": "meta.k8s.io", "kind": "DeleteOptions", "causes": causes(errors)})
    return options


def pod_grace_seconds(pod: Obj, options: Obj) -> int:
    """``podStrategy.CheckGracefulDelete``: the grace period this deletion gives the pod's kubelet."""
    spec, phase = pod.get("spec") or {}, (pod.get("status") or {}).get("phase")
    period = options.get("gracePeriodSeconds")
    if period is None:
        period = int(spec.get("terminationGracePeriodSeconds") or 0)
    if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
        period = 0
    return 1 if period < 0 else period


def default_orphans(resource: Resource) -> bool:
    """``DefaultGarbageCollectionPolicy`` is OrphanDependents: batch/v1 Jobs (the only such kind served here)."""
    return (resource.group, resource.version, resource.kind) == ("batch", "v1", "Job")


def gc_finalizers(resource: Resource, options: Obj) -> Any:
    """``deletionFinalizersForGarbageCollection`` as a function of the stored object: its finalizers with
    ``orphan``/``foregroundDeletion`` set as the options (else the object, else the resource default) say."""

    def finalizers(obj: Obj) -> list[str]:
        current = list(obj["metadata"].get("finalizers") or [])
        policy, orphan_option = options.get("propagationPolicy"), options.get("orphanDependents")
        if orphan_option is not None:
            orphan, foreground = bool(orphan_option), False
        elif policy is not None:
            orphan, foreground = policy == "Orphan", policy == "Foreground"
        elif ORPHAN in current or FOREGROUND in current:
            orphan, foreground = ORPHAN in current, FOREGROUND in current
        else:
            orphan, foreground = default_orphans(resource), False
        kept = [f for f in current if f not in (ORPHAN, FOREGROUND)]
        return kept + [ORPHAN] * orphan + [FOREGROUND] * foreground

    return finalizers


def warnings_for(resource: Resource, options: Obj) -> list[str]:
    """The Job REST storage's warning when the request leaves the propagation to batch/v1's orphaning default."""
    if default_orphans(resource) and options.get("propagationPolicy") is None and options.get(
            "orphanDependents") is None:
        return [JOB_DELETE_WARNING]
    return []
