"""Mutation as a pure function (controller-runtime's design): original pod in, desired pod out.

The JSON patch is computed from the two with ``jsonpatch``. Only missing keys are added, so
running the function on its own output (reinvocation, other webhooks in between) yields an
empty patch, and nothing another party set is removed or overwritten, except
``spec.schedulerName`` as configured and the ``unresolved`` marker (see ``desired_pod``).

The product's state that admission writes (owner, owner-uid, expected-members) is checked here,
on the pod as its creator sent it (``forged_state``): the validating webhook runs after us and
cannot tell our values from the creator's.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonpatch

from gang import keys
from gang.config import KEEP_SCHEDULER, Config
from gang.decide import Action, Decision
from gang.objects import Obj
from gang.validate import meta_map

# The only fields mutation writes: (section, field, the keys written in it or None for all).
TOUCHED = (
    ("metadata", "labels", frozenset(keys.WRITTEN_LABELS)),
    ("metadata", "annotations", frozenset(keys.WRITTEN_ANNOTATIONS)),
    ("spec", "schedulingGates", None),
    ("spec", "schedulerName", None),
)


def _own(parent: Obj, key: str, empty: Any) -> Any:
    """A private copy of ``parent[key]`` (or ``empty``), so the original pod is never modified."""
    value = parent.get(key)
    parent[key] = value = type(empty)(value) if isinstance(value, type(empty)) else empty
    return value


def _add_gate(spec: Obj) -> None:
    gates = _own(spec, "schedulingGates", [])
    if not any(isinstance(g, dict) and g.get("name") == keys.GANG_GATE for g in gates):
        gates.append({"name": keys.GANG_GATE})


# The product state admission writes for a member and checks on CREATE. Its fourth key, ``unresolved``, is not
# checked but set: it is what a pass that could not read the owner writes (with its reason, which differs from one
# failure to the next), and is removed by a pass that could; either way its meaning is only "decide this pod again".
CHECKED_STATE = (keys.OWNER_ANNOTATION, keys.OWNER_UID_ANNOTATION, keys.EXPECTED_MEMBERS_ANNOTATION)
_DO_NOT = ("only KubeNexus admission and its gate controller write the scheduling.kubenexus.io/ annotations: "
           "create the pod without it")


def member_state(decision: Decision) -> dict[str, str]:
    """What admission writes of ``CHECKED_STATE`` for a member of ``decision``'s gang (a key absent: none)."""
    state = {}
    if decision.owner:
        state[keys.OWNER_ANNOTATION] = decision.owner
        state[keys.OWNER_UID_ANNOTATION] = decision.owner_uid
    if decision.expected:
        state[keys.EXPECTED_MEMBERS_ANNOTATION] = json.dumps([e.as_json() for e in decision.expected],
                                                             separators=(",", ":"), sort_keys=True)
    return state


def _left_by_a_member_pass(pod: Obj) -> bool:
    """The owner keys as a member pass of admission leaves them: the gang label, owner and owner-uid together, on a
    pod with owner references (it had a root) or with the owner naming the PodGroup of the pod's gang label (a
    member of a user-created PodGroup)."""
    annotations, metadata, labels = meta_map(pod, "annotations"), pod.get("metadata"), meta_map(pod, "labels")
    pod_group = f"{keys.PODGROUP_API_VERSION}/{keys.PODGROUP_KIND}/{labels.get(keys.POD_GROUP_LABEL)}"
    return (isinstance(metadata, dict)
            and (bool(metadata.get("ownerReferences")) or annotations.get(keys.OWNER_ANNOTATION) == pod_group)
            and keys.POD_GROUP_LABEL in labels
            and all(key in annotations for key in (keys.OWNER_ANNOTATION, keys.OWNER_UID_ANNOTATION)))


def forged_state(pod: Obj, decision: Decision) -> str | None:
    """Why admission refuses ``pod`` (as its creator sent it) for product state it does not write; None if none.

    reinvocationPolicy IfNeeded sends our own output back to us, possibly changed by other webhooks in between
    (Kubernetes docs, "Reinvocation policy": mutating webhooks must be able to process an object they have already
    admitted), so a value equal to what this pass writes passes. Where this pass knows the truth it compares:
    a member (GANG) must carry exactly our values or none, a pod left alone (SKIP) none at all. Where it cannot
    read the owner (UNRESOLVED, or a GANG pass that ``kept`` an earlier pass's gang), it accepts the owner keys only
    as an earlier member pass leaves them; the alternative, refusing, would refuse a legitimate reinvocation.
    """
    annotations = meta_map(pod, "annotations")
    sent = [key for key in CHECKED_STATE if key in annotations]
    if not sent:
        return None
    if decision.action is Action.SKIP:
        reason = decision.reasons[-1] if decision.reasons else "not a gang member"
        return (f"metadata.annotations[{sent[0]}]: this pod is not gang-scheduled by KubeNexus ({reason}), so it "
                f"must not carry it; {_DO_NOT}")
    if decision.action is Action.GANG and not decision.kept:
        state = member_state(decision)
        for key in sent:
            if annotations[key] == state.get(key):
                continue
            if key in state:
                ours = f"{state[key]!r}"
            elif key == keys.EXPECTED_MEMBERS_ANNOTATION:
                ours = "none (no members of its gang are created later)"
            else:
                ours = "none (the pod has no root object)"
            return (f"metadata.annotations[{key}]: {annotations[key]!r} is not what KubeNexus admission writes for "
                    f"this pod: {ours}; {_DO_NOT}")
        return None
    if _left_by_a_member_pass(pod):
        return None
    return (f"metadata.annotations[{sent[0]}]: cannot be verified now (the owner could not be read) and is not what "
            f"KubeNexus admission writes; {_DO_NOT}")


def desired_pod(pod: Obj, decision: Decision, config: Config) -> Obj:
    """The pod as admission wants it: a new object sharing untouched parts with ``pod``.

    ``unresolved`` says only "decide this pod again": an UNRESOLVED pass writes its own reason, a GANG pass
    removes the marker (reinvocation after a pass that could not read the owner), a SKIP pass leaves the pod alone.
    """
    if decision.action is Action.SKIP:
        return pod
    desired = dict(pod)
    metadata, spec = _own(desired, "metadata", {}), _own(desired, "spec", {})
    annotations = _own(metadata, "annotations", {})
    _add_gate(spec)
    if decision.action is Action.UNRESOLVED:
        annotations[keys.UNRESOLVED_ANNOTATION] = decision.unresolved
        return desired
    annotations.pop(keys.UNRESOLVED_ANNOTATION, None)
    labels = _own(metadata, "labels", {})
    labels.setdefault(keys.POD_GROUP_LABEL, decision.group)
    labels.setdefault(keys.POD_GROUP_MIN_LABEL, str(decision.size))
    if config.cosched_annotations:
        annotations.setdefault(keys.COSCHED_GROUP_ANNOTATION, labels[keys.POD_GROUP_LABEL])
        annotations.setdefault(keys.COSCHED_MIN_ANNOTATION, labels[keys.POD_GROUP_MIN_LABEL])
    for key, value in member_state(decision).items():
        annotations.setdefault(key, value)
    if config.scheduler_name != KEEP_SCHEDULER:
        spec["schedulerName"] = config.scheduler_name
    return desired


def _touched(pod: Obj) -> Obj:
    """What mutation may change in ``pod``, at the same paths (absent stays absent).

    Maps keep only the keys mutation writes: every other key is equal on both sides.
    """
    view: Obj = {}
    for section, field, written in TOUCHED:
        parent = pod.get(section)
        if section in pod:
            view.setdefault(section, {} if isinstance(parent, dict) else parent)
        if isinstance(parent, dict) and field in parent:
            value = parent[field]
            if written is not None and isinstance(value, dict):
                value = {k: v for k, v in value.items() if k in written}
            view[section][field] = value
    return view


@functools.lru_cache(maxsize=4096)
def _diff(original: str, desired: str) -> str:
    return json.dumps(jsonpatch.JsonPatch.from_diff(json.loads(original), json.loads(desired),
                                                    optimization=False).patch)


def json_patch(original: Obj, desired: Obj) -> list[dict[str, Any]]:
    """RFC 6902 operations turning ``original`` into ``desired``.

    Mutation writes only what ``TOUCHED`` names, so diffing those views gives the same patch as
    diffing whole pods (a property test checks it) without walking every container of every pod.
    Pods of one workload have the same views, so the diff is computed once per shape (an executor
    storm costs one jsonpatch run); mutation never moves values (a marker removed and a key added with the same
    value are no move), so move detection is off.
    """
    operations: list[dict[str, Any]] = json.loads(_diff(json.dumps(_touched(original)), json.dumps(_touched(desired))))
    return operations
