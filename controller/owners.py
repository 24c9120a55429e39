"""What the controller reads from owners: whether a root still exists, and the gang of pods admission could not
resolve (the constraints on roots come from a watch: ``controller/roots.py``).

Admission gates a pod with ``scheduling.kubenexus.io/unresolved`` when the owner lookup failed
(timeout, 5xx); the gate controller asks again with the same decision code the webhook runs. A
pod that turns out to be a gang member gets the labels and annotations admission would have
written and then waits for its gang; any other pod is released at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import jsonpatch

from controller.members import PodView, owner_parts
from controller.release import release_patch
from gang import keys
from gang.adapters.table import adapter_for
from gang.config import Config
from gang.decide import Action, decide
from gang.mutate import desired_pod
from gang.objects import LookupFailed, ObjectSource

Obj = dict[str, Any]


def _owner(pod: PodView) -> tuple[str, str, str]:
    return owner_parts(pod.owner)


def root_exists(source: ObjectSource, pod: PodView) -> bool | None:
    """Whether the gang's root still exists (the object of its name with its uid); None when that cannot be told (a
    kind without an adapter, a failed read)."""
    api_version, kind, name = _owner(pod)
    adapter = adapter_for(api_version, kind)
    if adapter is None or not name or pod.gang is None:
        return None
    try:
        root = source.get(adapter.kind, api_version, pod.namespace, name, pod.gang[2])
    except LookupFailed:
        return None
    return root is not None and ((root.get("metadata") or {}).get("uid") or pod.gang[2]) == pod.gang[2]


def root_reference(pod: PodView) -> Obj | None:
    """An ObjectReference to the gang's root, for events, from the owner annotation."""
    api_version, kind, name = _owner(pod)
    if not (api_version and kind and name):
        return None
    return {"apiVersion": api_version, "kind": kind, "name": name,
            "namespace": pod.namespace, "uid": pod.gang[2] if pod.gang else ""}


class Step(StrEnum):
    """What to do with a pod admission left unresolved, once decided again."""

    JOIN = "join"  # ``patch`` adds the gang's labels
    RELEASE = "release"  # not a gang member after all: ``patch`` removes the gate
    RETRY = "retry"  # still cannot decide: try again later


@dataclass(frozen=True)
class Resolution:
    action: Step
    reason: str
    patch: list[Obj]
    group: str = ""  # the gang a "join" puts the pod in


def resolve(pod: Obj, source: ObjectSource, config: Config) -> Resolution:
    """Decide again for a pod admission left unresolved."""
    meta = pod.get("metadata") or {}
    decision = decide(pod, str(meta.get("namespace") or ""), source, config)
    reason = "; ".join(decision.reasons)
    if decision.action is Action.UNRESOLVED:
        return Resolution(Step.RETRY, decision.unresolved or reason, [])
    if decision.denial is not None:  # admission would refuse it (its min-available contradicts its PodGroup's)
        return Resolution(Step.RETRY, decision.denial.message, [])
    if decision.action is Action.SKIP:
        return Resolution(Step.RELEASE, reason, release_patch(pod, ""))
    desired = desired_pod(pod, decision, config)
    annotations = dict((desired.get("metadata") or {}).get("annotations") or {})
    annotations.pop(keys.UNRESOLVED_ANNOTATION, None)
    before = {"labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {}}
    after = {"labels": (desired.get("metadata") or {}).get("labels") or {}, "annotations": annotations}
    ops = [{"op": "test", "path": "/metadata/uid", "value": meta.get("uid")}] if meta.get("uid") else []
    for part in ("labels", "annotations"):
        if part not in meta:
            ops.append({"op": "add", "path": f"/metadata/{part}", "value": {}})
        ops += [dict(op, path=f"/metadata/{part}{op['path']}")
                for op in jsonpatch.make_patch(before[part], after[part])]
    return Resolution(Step.JOIN, reason, ops, decision.group)
