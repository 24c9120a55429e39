"""The owner walk: from a pod, follow ownerReferences up to the root of its workload.

At each hop the ``controller: true`` reference is followed; a reference without the flag
only where the owning kind's adapter says the operator never sets it. The walk is bounded
(10 hops), detects cycles and reads every owner through the (cached) object source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from gang.adapters.base import WorkloadAdapter
from gang.adapters.table import adapter_for
from gang.kinds import INTERMEDIATE, NON_BATCH_OWNERS, split_api_version
from gang.objects import Deadline, LookupFailed, Obj, ObjectSource

MAX_HOPS = 10


class Outcome(Enum):
    ROOT = "root"  # chain ends at a supported root kind
    NO_OWNER = "no-owner"  # the pod has no owner reference to follow
    NO_ROOT = "no-root"  # the chain ends at an object that is not a root (a bare StatefulSet)
    NON_BATCH = "non-batch"  # a Deployment/DaemonSet/... pod: not a gang workload
    UNKNOWN_KIND = "unknown-kind"  # an owner kind nobody registered
    MISSING = "missing"  # an owner does not exist (404, or recreated with another uid)
    FAILED = "failed"  # the API could not answer
    CYCLE = "cycle"
    TOO_DEEP = "too-deep"
    INVALID_REF = "invalid-ref"


@dataclass
class Walk:
    outcome: Outcome
    detail: str = ""
    chain: list[Obj] = field(default_factory=list)  # owners, nearest first; root last
    adapter: WorkloadAdapter | None = None


def _meta(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def next_reference(obj: Obj, non_controller: frozenset[tuple[str, str]]) -> dict[str, Any] | None:
    """The reference to follow from ``obj``: its controller, else an allowed non-controller one."""
    refs = [r for r in _meta(obj).get("ownerReferences") or [] if isinstance(r, dict)]
    for ref in refs:
        if ref.get("controller") is True:
            return ref
    for ref in refs:
        if (split_api_version(str(ref.get("apiVersion", "")))[0], ref.get("kind")) in non_controller:
            return ref
    return None


def walk_owners(pod: Obj, namespace: str, source: ObjectSource, deadline: Deadline | None = None) -> Walk:
    """Read the pod's owners up to its root; the outcome says where and why the walk stopped.

    Reads that cannot finish before ``deadline`` fail (``Outcome.FAILED``)."""
    chain: list[Obj] = []
    seen: set[tuple[str, str, str]] = set()
    obj, non_controller = pod, frozenset[tuple[str, str]]()
    for _ in range(MAX_HOPS):
        ref = next_reference(obj, non_controller)
        if ref is None:
            break
        api_version, kind, name = ref.get("apiVersion"), ref.get("kind"), ref.get("name")
        if not (isinstance(api_version, str) and isinstance(kind, str) and isinstance(name, str) and name):
            return Walk(Outcome.INVALID_REF, f"ownerReference {ref!r} lacks apiVersion, kind or name", chain)
        group = split_api_version(api_version)[0]
        adapter = adapter_for(api_version, kind)
        kind_info = adapter.kind if adapter else INTERMEDIATE.get((group, kind))
        label = f"{kind}.{group}" if group else kind
        if kind_info is None:
            outcome = Outcome.NON_BATCH if (group, kind) in NON_BATCH_OWNERS else Outcome.UNKNOWN_KIND
            return Walk(outcome, f"owner kind {label} ({api_version}) is not a supported workload", chain)
        identity = (group, kind, name)
        if identity in seen:
            return Walk(Outcome.CYCLE, f"ownerReferences loop back to {label} {name}", chain)
        seen.add(identity)
        uid = ref.get("uid") if isinstance(ref.get("uid"), str) else None
        try:
            owner = source.get(kind_info, api_version, namespace, name, uid, deadline)
        except LookupFailed as exc:
            return Walk(Outcome.FAILED, f"reading {label} {namespace}/{name}: {exc}", chain)
        if owner is None or (uid and _meta(owner).get("uid") != uid):
            return Walk(Outcome.MISSING, f"owner {label} {namespace}/{name} does not exist", chain)
        chain.append(owner)
        obj, non_controller = owner, (adapter.non_controller_owners if adapter else frozenset())
    else:
        if next_reference(obj, non_controller) is not None:
            return Walk(Outcome.TOO_DEEP, f"owner chain is longer than {MAX_HOPS} hops", chain)
    if not chain:
        return Walk(Outcome.NO_OWNER, "pod has no controller owner", chain)
    root = chain[-1]
    adapter = adapter_for(str(root.get("apiVersion", "")), str(root.get("kind", "")))
    if adapter is None:
        return Walk(Outcome.NO_ROOT, f"owner chain ends at {root.get('kind')} {_meta(root).get('name')}", chain)
    return Walk(Outcome.ROOT, "", chain, adapter)
