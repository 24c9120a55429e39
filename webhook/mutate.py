"""Mutation as a pure function (controller-runtime's design): original pod in, desired pod out.

The JSON patch is computed from the two with ``jsonpatch``. Only missing keys are added, so
running the function on its own output (reinvocation, other webhooks in between) yields an
empty patch, and nothing another party set is removed or overwritten, except
``spec.schedulerName`` as configured.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch

from gang import keys
from gang.config import KEEP_SCHEDULER, Config
from gang.decide import Action, Decision

Obj = dict[str, Any]


def _section(obj: Obj, *path: str) -> dict[str, Any]:
    node = obj
    for part in path:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    return node


def _add_gate(pod: Obj) -> None:
    spec = _section(pod, "spec")
    gates = spec.get("schedulingGates")
    if not isinstance(gates, list):
        gates = spec["schedulingGates"] = []
    if not any(isinstance(g, dict) and g.get("name") == keys.GANG_GATE for g in gates):
        gates.append({"name": keys.GANG_GATE})


def desired_pod(pod: Obj, decision: Decision, config: Config) -> Obj:
    """The pod as admission wants it. Returns a new object; ``pod`` is not modified."""
    if decision.action is Action.SKIP:
        return pod
    desired = copy.deepcopy(pod)
    annotations = _section(desired, "metadata", "annotations")
    _add_gate(desired)
    if decision.action is Action.UNRESOLVED:
        annotations.setdefault(keys.UNRESOLVED_ANNOTATION, decision.unresolved)
        return desired
    labels = _section(desired, "metadata", "labels")
    labels.setdefault(keys.POD_GROUP_LABEL, decision.group)
    labels.setdefault(keys.POD_GROUP_MIN_LABEL, str(decision.size))
    if config.cosched_annotations:
        annotations.setdefault(keys.COSCHED_GROUP_ANNOTATION, labels[keys.POD_GROUP_LABEL])
        annotations.setdefault(keys.COSCHED_MIN_ANNOTATION, labels[keys.POD_GROUP_MIN_LABEL])
    if decision.owner:
        annotations.setdefault(keys.OWNER_ANNOTATION, decision.owner)
        annotations.setdefault(keys.OWNER_UID_ANNOTATION, decision.owner_uid)
    if decision.expected:
        annotations.setdefault(
            keys.EXPECTED_MEMBERS_ANNOTATION,
            json.dumps([e.as_json() for e in decision.expected], separators=(",", ":"), sort_keys=True),
        )
    if config.scheduler_name != KEEP_SCHEDULER:
        desired["spec"]["schedulerName"] = config.scheduler_name
    return desired


def json_patch(original: Obj, desired: Obj) -> list[dict[str, Any]]:
    """RFC 6902 operations turning ``original`` into ``desired``."""
    return jsonpatch.make_patch(original, desired).patch
