"""kube-controller-manager's garbage collector (``pkg/controller/garbagecollector``), over every stored resource.

Each pass classifies every ownerReference of every object as the collector's ``classifyReferences`` does: the
owner is *absent* (dangling) when no object of that kind, name and namespace has that uid (a namespaced owner
is looked up in the dependent's namespace); *waiting* when it is being deleted in the foreground; *solid*
otherwise. References the collector cannot resolve (a kind not served, a namespaced owner of a cluster-scoped
object) keep the object, as the real one keeps retrying them. Then (``attemptToDeleteItem``):

- an object with a solid owner loses its dangling and waiting references (a patch, resourceVersion-pinned);
- an object with no solid owner is deleted (uid precondition): in the foreground if an owner waits for it and
  it has dependents of its own, otherwise as its own ``orphan``/``foregroundDeletion`` finalizer says, else in
  the background;
- an owner deleted with ``orphan`` (``orphanDependents``): its references are removed from every dependent,
  then the finalizer;
- an owner deleted with ``foregroundDeletion`` (``processDeletingDependentsItem``): its dependents are deleted
  as above; the finalizer goes once no dependent that references it with ``blockOwnerDeletion`` is left.

Which finalizer a DELETE sets, and the default policies, are the apiserver's (``cluster/deletion.py``).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

from cluster.apiserver import ApiServer
from cluster.controllers import Loop
from cluster.deletion import FOREGROUND, ORPHAN
from cluster.operators.base import service_account, url
from cluster.resources import Resource
from cluster.store import ApiError, Obj

Item = tuple[Resource, Obj]


def _path(resource: Resource, obj: Obj) -> str:
    return url((resource.group, resource.version, resource.plural), obj["metadata"].get("namespace"),
               obj["metadata"]["name"])


class GarbageCollector(Loop):
    period = 0.5
    coalesce = 0.2  # a pass reads every object: bursts of changes cost one

    def __init__(self, api: ApiServer) -> None:
        super().__init__(api, service_account("kube-system", "generic-garbage-collector"))
        self._kinds: dict[tuple[str, str], Resource] = {}  # (apiVersion, kind) -> resource, per pass

    def reconcile(self) -> None:
        served = self.api.registry.all()
        self._kinds = {(r.api_version, r.kind): r for r in served}
        stored: dict[tuple[str, str], Resource] = {}  # one per stored kind: a CRD's versions share their objects
        for resource in served:
            if resource.stored:
                stored.setdefault((resource.group, resource.plural), resource)
        items: list[Item] = [(r, o) for r in stored.values() for o in self.store.items(r)]
        by_uid = {o["metadata"]["uid"]: (r, o) for r, o in items}
        dependents: dict[str, list[Item]] = defaultdict(list)
        for resource, obj in items:
            for ref in obj["metadata"].get("ownerReferences") or []:
                dependents[ref.get("uid", "")].append((resource, obj))
        for resource, obj in items:
            finalizers = obj["metadata"].get("finalizers") or []
            if obj["metadata"].get("deletionTimestamp") and ORPHAN in finalizers:
                self._orphan(resource, obj, dependents[obj["metadata"]["uid"]])
            elif obj["metadata"].get("deletionTimestamp") and FOREGROUND in finalizers:
                self._finish_foreground(resource, obj, dependents[obj["metadata"]["uid"]])
            if obj["metadata"].get("ownerReferences"):
                self._collect(resource, obj, by_uid, dependents)

    def _classify(self, resource: Resource, obj: Obj, by_uid: dict[str, Item]) -> dict[str, list[Obj]] | None:
        """Owner references by class (solid, dangling, waiting); None when one cannot be resolved."""
        classes: dict[str, list[Obj]] = {"solid": [], "dangling": [], "waiting": []}
        for ref in obj["metadata"].get("ownerReferences") or []:
            owner_resource = self._kinds.get((ref.get("apiVersion", ""), ref.get("kind", "")))
            if owner_resource is None or (owner_resource.namespaced and not resource.namespaced):
                return None
            found = by_uid.get(ref.get("uid", ""))
            owner_kind, owner = found if found else (None, None)
            if owner_kind is None or owner is None or owner_kind.kind != owner_resource.kind \
                    or owner_kind.group != owner_resource.group or owner["metadata"]["name"] != ref.get("name") or (
                        owner_resource.namespaced and owner["metadata"].get("namespace")
                        != obj["metadata"].get("namespace")):
                classes["dangling"].append(ref)
            elif owner["metadata"].get("deletionTimestamp") and FOREGROUND in (owner["metadata"].get("finalizers")
                                                                               or []):
                classes["waiting"].append(ref)
            else:
                classes["solid"].append(ref)
        return classes

    def _collect(self, resource: Resource, obj: Obj, by_uid: dict[str, Item],
                 dependents: dict[str, list[Item]]) -> None:
        classes = self._classify(resource, obj, by_uid)
        if classes is None:
            return
        if classes["solid"]:
            gone = {r.get("uid") for r in classes["dangling"] + classes["waiting"]}
            if gone:
                self._drop_references(resource, obj, gone)
            return
        if obj["metadata"].get("deletionTimestamp"):
            return
        if classes["waiting"] and dependents.get(obj["metadata"]["uid"]):
            self._delete_item(resource, obj, "Foreground")
            return
        finalizers = obj["metadata"].get("finalizers") or []
        self._delete_item(resource, obj, "Orphan" if ORPHAN in finalizers else
                     "Foreground" if FOREGROUND in finalizers else "Background")

    def _orphan(self, resource: Resource, owner: Obj, children: list[Item]) -> None:
        uid = owner["metadata"]["uid"]
        for child_resource, child in children:
            self._drop_references(child_resource, child, {uid})
        if not children:
            self._drop_finalizer(resource, owner, ORPHAN)

    def _finish_foreground(self, resource: Resource, owner: Obj, children: list[Item]) -> None:
        """The dependents are deleted by ``_collect`` (their owner waits); the owner goes once none blocks it."""
        uid = owner["metadata"]["uid"]
        if not any(r.get("uid") == uid and r.get("blockOwnerDeletion")
                   for _, child in children for r in child["metadata"].get("ownerReferences") or []):
            self._drop_finalizer(resource, owner, FOREGROUND)

    def _delete_item(self, resource: Resource, obj: Obj, policy: str) -> None:
        with contextlib.suppress(ApiError):  # gone, replaced or changed meanwhile: the next pass sees it
            self.client.call("DELETE", _path(resource, obj), {"propagationPolicy": policy,
                                                              "preconditions": {"uid": obj["metadata"]["uid"]}})

    def _drop_references(self, resource: Resource, obj: Obj, uids: set[str | None]) -> None:
        meta = obj["metadata"]
        kept = [r for r in meta.get("ownerReferences") or [] if r.get("uid") not in uids]
        with contextlib.suppress(ApiError):
            self.client.patch(_path(resource, obj), {"metadata": {"ownerReferences": kept or None,
                                                                  "resourceVersion": meta["resourceVersion"]}})

    def _drop_finalizer(self, resource: Resource, obj: Obj, finalizer: str) -> None:
        meta = obj["metadata"]
        kept = [f for f in meta.get("finalizers") or [] if f != finalizer]
        with contextlib.suppress(ApiError):
            self.client.patch(_path(resource, obj), {"metadata": {"finalizers": kept or None,
                                                                  "resourceVersion": meta["resourceVersion"]}})
