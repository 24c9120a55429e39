"""Mutation as a pure function (controller-runtime's design): original pod in, desired pod out.

The JSON patch is computed from the two with ``jsonpatch``. Only missing keys are added, so
running the function on its own output (reinvocation, other webhooks in between) yields an
empty patch, and nothing another party set is removed or overwritten, except
``spec.schedulerName`` as configured.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonpatch

from gang import keys
from gang.config import KEEP_SCHEDULER, Config
from gang.decide import Action, Decision

Obj = dict[str, Any]


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


def desired_pod(pod: Obj, decision: Decision, config: Config) -> Obj:
    """The pod as admission wants it: a new object sharing untouched parts with ``pod``."""
    if decision.action is Action.SKIP:
        return pod
    desired = dict(pod)
    metadata, spec = _own(desired, "metadata", {}), _own(desired, "spec", {})
    annotations = _own(metadata, "annotations", {})
    _add_gate(spec)
    if decision.action is Action.UNRESOLVED:
        annotations.setdefault(keys.UNRESOLVED_ANNOTATION, decision.unresolved)
        return desired
    labels = _own(metadata, "labels", {})
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
    storm costs one jsonpatch run); mutation never moves values, so move detection is off.
    """
    return json.loads(_diff(json.dumps(_touched(original)), json.dumps(_touched(desired))))
