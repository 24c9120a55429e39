"""The gangs' root objects as the gate controller knows them, and what each gang's constraints are.

A gang's constraints (topology requests, JobSet's exclusive topology, schedule timeout, best effort, opt-out) are
annotations on its root object (a PyTorchJob, a JobSet, ...). The controller watches every root resource the adapters
serve (``controller/root_watch.py``); ``kubenexus simulate`` reads the roots of its snapshot. Both hand whole objects
to ``Roots.upsert``, which keeps exactly the annotations the contract reads (``keys.read_on_roots``, the rule the
webhook's owner reads keep too): what reaches the engine live is what reaches it in ``simulate``.

Fail closed: a gang whose root cannot be known (its resource not watched yet, the watch failing, the root not seen, a
root of that name that is another object) gets ``Unknown`` with the reason, never an empty set of constraints. Only a
gang that has no root object at all (explicit pod-group labels, a user-created PodGroup) has none by definition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from controller.members import PodView, owner_parts
from gang import keys
from gang.adapters.table import ROOT_RESOURCES, adapter_for
from gang.kinds import split_api_version

NONE: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Unknown:
    """A gang's constraints cannot be known now; ``reason`` says why (it waits, and says so). ``unseen``: the watch
    works but has not delivered the root (yet: a new job's pods and its root come by two watches)."""

    reason: str
    unseen: bool = False


Constraints = Mapping[str, str] | Unknown


@dataclass(frozen=True, slots=True)
class RootView:
    """What the controller keeps of a root object: its uid and the annotations the contract reads."""

    uid: str
    annotations: Mapping[str, str]


def root_view(obj: Mapping[str, Any]) -> RootView:
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return RootView(str(meta.get("uid") or ""), MappingProxyType({
        str(k): str(v) for k, v in annotations.items() if keys.read_on_roots(str(k))}))


def _identity(obj: Mapping[str, Any], group: str, kind: str) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return group, kind, str(meta.get("namespace") or ""), str(meta.get("name") or "")


class Roots:
    """Root objects by (group, kind, namespace, name), and per (group, kind) whether they are known (not thread-safe:
    the decision loop owns it, like the rest of ``ClusterState``)."""

    def __init__(self, seen_by: str = "the gate controller's watch", missing: str = "deleted, or not seen yet") -> None:
        self.seen_by = seen_by  # where roots come from, for reasons: the watch, or simulate's snapshot
        self.missing = missing  # what a root that is not there means, there
        self._objects: dict[tuple[str, str, str, str], RootView] = {}
        # (group, kind) -> version -> "" when that version's watch has listed everything, else why not
        self._watches: dict[tuple[str, str], dict[str, str]] = {}

    def heard(self) -> bool:
        """Whether every root resource's watch has listed it or said why it cannot (``watching``): the decision loop
        waits for this at start, so that a gang is not told its root is unknown while the watches are being set up."""
        return all(resource.version in self._watches.get((resource.group, resource.kind), {})
                   for resource in ROOT_RESOURCES)

    def watching(self, group: str, version: str, kind: str, problem: str) -> None:
        """The watch of ``group/version`` ``kind`` has listed everything (``problem`` "") or cannot (why)."""
        self._watches.setdefault((group, kind), {})[version] = problem

    def upsert(self, group: str, kind: str, obj: Mapping[str, Any]) -> str | None:
        """Keep a root as the watch or a snapshot delivered it; returns its uid when what the contract reads of it
        changed (its gangs must be decided again), else None."""
        key = _identity(obj, group, kind)
        view = root_view(obj)
        old = self._objects.get(key)
        self._objects[key] = view
        return view.uid if old is None or old != view else None

    def delete(self, group: str, kind: str, obj: Mapping[str, Any]) -> str | None:
        """Forget a root; returns its uid when it was known."""
        old = self._objects.pop(_identity(obj, group, kind), None)
        return old.uid if old is not None else None

    def constraints(self, pod: PodView) -> Constraints:
        """What the gang of ``pod`` (a member) asks for on its root, or why that cannot be known."""
        api_version, kind, name = owner_parts(pod.owner)
        adapter = adapter_for(api_version, kind) if api_version and kind and name else None
        if adapter is None:
            return NONE  # no root object: explicit pod-group labels, or a user-created PodGroup (its own gang)
        group, version = split_api_version(api_version)
        where = f"{kind} {pod.namespace}/{name}"
        watches = self._watches.get((group, kind), {})
        if not any(problem == "" for problem in watches.values()):
            problems = "; ".join(f"{v}: {p}" for v, p in sorted(watches.items()) if p) or "not listed yet"
            return Unknown(f"the constraints on its root {where} cannot be read: {self.seen_by} of {kind} objects "
                           f"({group}) has not listed them ({problems})")
        view = self._objects.get((group, kind, pod.namespace, name))
        uid = pod.gang[2] if pod.gang else ""
        if view is None:
            return Unknown(f"its root {where} is not in {self.seen_by} ({self.missing.format(adapter.kind.plural)}): "
                           "its constraints cannot be read", unseen=True)
        if uid and view.uid and view.uid != uid:
            return Unknown(f"its root {where} is another object now (uid {view.uid}, the gang's is {uid}): the gang's "
                           "root was deleted")
        return view.annotations


def snapshot(objects: Iterable[Mapping[str, Any]], seen_by: str = "the snapshot",
             missing: str = "add it to the snapshot: kubectl get {} -A -o yaml") -> Roots:
    """The roots of a snapshot that is everything there is (``kubenexus simulate``, benchmarks): every root resource
    listed, and its objects read as the watch reads them."""
    roots = Roots(seen_by, missing)
    for resource in ROOT_RESOURCES:
        roots.watching(resource.group, resource.version, resource.kind, "")
    for obj in objects:
        api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
        if adapter_for(api_version, kind) is not None:
            roots.upsert(split_api_version(api_version)[0], kind, obj)
    return roots
