"""Releasing a member: one JSON patch that removes the gate, pins the planned node and records it.

The patch is computed the controller-runtime way: the desired pod is a pure function of the
current one, and ``jsonpatch`` diffs the two. A ``test`` on the uid makes sure a pod recreated
under the same name is never released by mistake; a ``test`` on the gate list makes sure a
concurrent change (another gate removed) fails the patch instead of being undone.

Pinning follows the apiserver's rule for gated pods: required node affinity may only be
narrowed, so the pin is ANDed into every existing term (a new term would widen the ORed set
and is rejected); a pod without required node affinity gets a single term.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import jsonpatch

from gang import keys

Obj = dict[str, Any]
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def pin_requirement(node: str) -> Obj:
    return {"key": "metadata.name", "operator": "In", "values": [node]}


def pinned_affinity(affinity: Mapping[str, Any] | None, node: str) -> Obj:
    """``affinity`` narrowed to ``node``: the pin ANDed into every required term."""
    result = copy.deepcopy(dict(affinity or {}))
    node_affinity = result.setdefault("nodeAffinity", {})
    terms = (node_affinity.get(_REQUIRED) or {}).get("nodeSelectorTerms") or []
    pin = pin_requirement(node)
    if not terms:
        node_affinity[_REQUIRED] = {"nodeSelectorTerms": [{"matchFields": [pin]}]}
        return result
    for term in terms:
        fields = term.setdefault("matchFields", [])
        if pin not in fields:
            fields.append(pin)
    return result


def released_pod(pod: Mapping[str, Any], node: str, reserved_nodes: tuple[str, ...] = (), pin: bool = True) -> Obj:
    """The pod as it should be after release (pure: ``pod`` is not modified).

    ``node`` is recorded as the planned node (the controller keeps its room reserved until the
    pod is bound) and, with ``pin``, becomes a required node-affinity pin.
    """
    desired = copy.deepcopy(dict(pod))
    spec = desired.setdefault("spec", {})
    gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != keys.GANG_GATE]
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)
    annotations = desired.setdefault("metadata", {}).setdefault("annotations", {})
    annotations.pop(keys.UNRESOLVED_ANNOTATION, None)
    if node:
        annotations[keys.PLANNED_NODE_ANNOTATION] = node
        if pin:
            spec["affinity"] = pinned_affinity(spec.get("affinity"), node)
    if reserved_nodes:
        annotations[keys.RESERVED_NODES_ANNOTATION] = json.dumps(list(reserved_nodes), separators=(",", ":"))
    return desired


def _view(pod: Mapping[str, Any]) -> Obj:
    """The parts of a pod the release touches (the diff looks at nothing else)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    view: Obj = {"metadata": {"annotations": dict(meta.get("annotations") or {})}, "spec": {}}
    for name in ("schedulingGates", "affinity"):
        if name in spec:
            view["spec"][name] = copy.deepcopy(spec[name])
    return view


def release_patch(pod: Mapping[str, Any], node: str, reserved_nodes: tuple[str, ...] = (),
                  pin: bool = True) -> list[Obj]:
    """JSON patch (RFC 6902) from ``pod`` to its released form, guarded by ``test`` operations.

    ``pod`` may be the full object or a partial one carrying metadata.uid, metadata.annotations,
    spec.schedulingGates and spec.affinity; only those are compared.
    """
    original = _view(pod)
    desired = _view(released_pod(pod, node, reserved_nodes, pin))
    if "annotations" not in (pod.get("metadata") or {}):
        # JSON patch cannot add a key below a missing object: create the map first.
        guard = [{"op": "add", "path": "/metadata/annotations", "value": {}}]
    else:
        guard = []
    uid = (pod.get("metadata") or {}).get("uid")
    tests = [{"op": "test", "path": "/metadata/uid", "value": uid}] if uid else []
    gates = (pod.get("spec") or {}).get("schedulingGates")
    if gates is not None:
        tests.append({"op": "test", "path": "/spec/schedulingGates", "value": gates})
    return tests + guard + list(jsonpatch.make_patch(original, desired))
