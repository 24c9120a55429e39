"""The pods/binding subresource's refusals (pkg/registry/core/pod/storage/storage.go)."""

from __future__ import annotations

import json

from cluster.store import Obj


def validate_binding(pod: Obj) -> tuple[int, str] | None:
    """Whether POST pods/{name}/binding may bind the stored ``pod``; ``(status, message)`` if not.

    Upstream (pkg/registry/core/pod/storage/storage.go) checks inside the storage update, in this order:
    being deleted, already assigned (spec.nodeName set), then "Reject binding to a scheduling un-ready Pod"
    (non-empty spec.schedulingGates). Those are plain errors, which assignPod wraps with
    errors.NewConflict(pods/binding): HTTP 409 Conflict, as upstream's TestEtcdCreateWithSchedulingGates
    expects: ``Operation cannot be fulfilled on pods/binding "foo": pod foo has non-empty .spec.schedulingGates``.
    """
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    name = meta.get("name") or ""
    if meta.get("deletionTimestamp"):
        reason = f"pod {name} is being deleted, cannot be assigned to a host"
    elif spec.get("nodeName"):
        reason = f"pod {name} is already assigned to node {json.dumps(spec['nodeName'])}"
    elif spec.get("schedulingGates"):
        reason = f"pod {name} has non-empty .spec.schedulingGates"
    else:
        return None
    return 409, f'Operation cannot be fulfilled on pods/binding "{name}": {reason}'
