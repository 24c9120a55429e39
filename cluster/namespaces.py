"""kube-controller-manager's namespace controller (``pkg/controller/namespace/namespace_controller.go``) and its
deleter (``pkg/controller/namespace/deletion/namespaced_resources_deleter.go``, ``status_condition_utils.go``).

A namespace being deleted (``deletionTimestamp`` set: the registry's first DELETE, ``cluster/lifecycle.py``) is
emptied, then released:

1. its phase is made Terminating if it is not (``updateNamespaceStatusFunc``, through ``/status``); a namespace
   whose ``spec.finalizers`` is already empty is left alone (``finalized``);
2. every namespaced resource that discovery (``ServerPreferredNamespacedResources``: each group's preferred version)
   lists with the ``delete`` verb is emptied by a collection DELETE (``propagationPolicy: Background``), else, where
   that is not supported, one DELETE per object; each object's finalizers, and a pod's graceful deletion, hold it as
   for any deletion. Then the resource is listed again: what remains is waited for while a pod's grace period could
   still run (the longest ``terminationGracePeriodSeconds`` of the non-terminal pods, counted from the namespace's
   ``deletionTimestamp``) or while it has finalizers (``finalizerEstimateSeconds``, 15 s), and is an error otherwise
   ("unexpected items still remain");
3. the namespace's status gets the five conditions the deleter keeps (``NamespaceDeletionDiscoveryFailure``,
   ``NamespaceDeletionGroupVersionParsingFailure``, ``NamespaceDeletionContentFailure``,
   ``NamespaceContentRemaining``, ``NamespaceFinalizersRemaining``), True with what failed or remains, else False
   with their "ok" reason and message; written only when one changed;
4. once nothing remains, ``kubernetes`` is removed from ``spec.finalizers`` through ``/finalize`` (conflicts retried
   from a fresh read); the namespace goes with its last finalizer (``cluster/store.py``).

Upstream requeues a namespace with content remaining after half the estimate; this controller looks again after
every change in the store (at least every ``period``), so an emptied namespace goes as soon as it is empty.
"""

from __future__ import annotations

import copy
import datetime
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from cluster.apiserver import ApiServer
from cluster.controllers import Loop
from cluster.lifecycle import KUBERNETES_FINALIZER, TERMINATING
from cluster.operators.base import GVR, service_account, url
from cluster.store import ApiError, Obj, now, parse_time

log = logging.getLogger("kubenexus.cluster.namespaces")

NAMESPACES: GVR = ("", "v1", "namespaces")
FINALIZER_ESTIMATE_SECONDS = 15  # finalizerEstimateSeconds: how long finalizers on remaining content may take
CONFLICT_RETRIES = 10  # retryOnConflictError retries forever; a namespace still contended waits for the next pass
#: conditionTypes, in the order the deleter appends them, with their "ok" reason and message
OK_CONDITIONS = {
    "NamespaceDeletionDiscoveryFailure": ("ResourcesDiscovered", "All resources successfully discovered"),
    "NamespaceDeletionGroupVersionParsingFailure": ("ParsedGroupVersions", "All legacy kube types successfully parsed"),
    "NamespaceDeletionContentFailure": ("ContentDeleted",
                                        "All content successfully deleted, may be waiting on finalization"),
    "NamespaceContentRemaining": ("ContentRemoved", "All content successfully removed"),
    "NamespaceFinalizersRemaining": ("ContentRemoved", "All content successfully removed"),
}


@dataclass(frozen=True)
class Discovered:
    """One resource discovery lists: a ``GroupVersionResource`` and its verbs."""

    group: str
    version: str
    plural: str
    verbs: frozenset[str]

    @property
    def gvr(self) -> GVR:
        return self.group, self.version, self.plural

    def __str__(self) -> str:  # schema.GroupVersionResource.String()
        return f"{self.group}/{self.version}, Resource={self.plural}"


@dataclass
class Remaining:
    """``gvrDeletionMetadata``: how long to wait, how many objects remain, and the finalizers holding them."""

    estimate: int = 0
    count: int = 0
    finalizers: Counter[str] = field(default_factory=Counter)


class ContentError(Exception):
    """What a resource's emptying found wrong (an ``error`` beside its ``gvrDeletionMetadata``)."""

    def __init__(self, message: str, remaining: Remaining) -> None:
        super().__init__(message)
        self.remaining = remaining


def _condition(type_: str, reason: str, message: str) -> Obj:
    return {"type": type_, "status": "True", "lastTransitionTime": now(), "reason": reason, "message": message}


def updated_conditions(current: list[Obj], failing: list[Obj]) -> tuple[list[Obj], bool]:
    """``updateConditions``: every type the deleter keeps, the failing one or else its "ok" variant; an existing
    condition keeps its place and its lastTransitionTime unless its status changes. The conditions, and whether
    they changed."""
    conditions, changed = copy.deepcopy(current), False
    for type_, (reason, message) in OK_CONDITIONS.items():
        wanted = next((c for c in failing if c["type"] == type_), None) or {
            "type": type_, "status": "False", "lastTransitionTime": now(), "reason": reason, "message": message}
        old = next((c for c in conditions if c.get("type") == type_), None)
        if old is None:
            conditions.append(wanted)
            changed = True
        elif any(old.get(k) != wanted[k] for k in ("status", "reason", "message")):
            if old.get("status") != wanted["status"]:
                old["lastTransitionTime"] = now()
            old.update(status=wanted["status"], reason=wanted["reason"], message=wanted["message"])
            changed = True
    return conditions, changed


def content_conditions(remaining: dict[Discovered, Remaining], errors: list[str]) -> list[Obj]:
    """``ProcessContentTotals`` and ``makeDeleteContentCondition``: what remains, by resource and by finalizer, and
    which resources could not be emptied."""
    failing = []
    counts = sorted(f"{d.plural}.{d.group} has {r.count} resource instances" for d, r in remaining.items() if r.count)
    if counts:
        failing.append(_condition("NamespaceContentRemaining", "SomeResourcesRemain",
                                  f"Some resources are remaining: {', '.join(counts)}"))
    held: Counter[str] = Counter()
    for r in remaining.values():
        held.update(r.finalizers)
    if held:
        finalizers = sorted(f"{name} in {n} resource instances" for name, n in held.items())
        failing.append(_condition("NamespaceFinalizersRemaining", "SomeFinalizerRemain",
                                  f"Some finalizers are remaining: {', '.join(finalizers)}"))
    if errors:
        failing.append(_condition("NamespaceDeletionContentFailure", "ContentDeletionFailed",
                                  f"Failed to delete all resource types, {len(errors)} remaining: "
                                  f"{', '.join(sorted(errors))}"))
    return failing


class NamespaceController(Loop):
    """Empties and releases every namespace being deleted."""

    period = 1.0
    coalesce = 0.2

    def __init__(self, api: ApiServer) -> None:
        super().__init__(api, service_account("kube-system", "namespace-controller"))

    def reconcile(self) -> None:
        namespaces = self.api.registry.get(*NAMESPACES)
        assert namespaces is not None
        for namespace in list(self.store.items(namespaces)):
            if namespace["metadata"].get("deletionTimestamp"):
                try:
                    self.sync(namespace["metadata"]["name"])
                except (ApiError, ContentError) as exc:  # requeued: the next pass tries again
                    log.debug("namespace %s: %s", namespace["metadata"]["name"], exc)

    def sync(self, name: str) -> None:
        """``namespacedResourcesDeleter.Delete``."""
        try:
            namespace = self.client.call("GET", url(NAMESPACES, None, name))
        except ApiError as exc:
            if exc.code == 404:
                return
            raise
        if not namespace["metadata"].get("deletionTimestamp"):
            return
        namespace = self._retrying(namespace, self._terminating)
        if not (namespace.get("spec") or {}).get("finalizers"):
            return
        estimate = self._delete_all_content(namespace)
        if estimate > 0:  # ResourcesRemainingError: the next pass looks again
            log.debug("namespace %s: some content remains, estimate %d seconds before it is removed", name, estimate)
            return
        try:
            self._retrying(namespace, self._finalize)
        except ApiError as exc:
            if exc.code != 404:  # gone already: released by whoever removed the last finalizer
                raise

    def _retrying(self, namespace: Obj, write: Callable[[Obj], Obj]) -> Obj:
        """``retryOnConflictError``: ``write`` again from a fresh read after a conflict, the same namespace (by
        uid) only."""
        latest = namespace
        for _ in range(CONFLICT_RETRIES):
            try:
                return write(latest)
            except ApiError as exc:
                if exc.code != 409:
                    raise
            fresh = self.client.call("GET", url(NAMESPACES, None, latest["metadata"]["name"]))
            if fresh["metadata"]["uid"] != latest["metadata"]["uid"]:
                raise ApiError(500, "InternalError", "namespace uid has changed across retries")
            latest = fresh
        raise ApiError(409, "Conflict", f"namespace {namespace['metadata']['name']}: too many conflicts")

    def _terminating(self, namespace: Obj) -> Obj:
        """``updateNamespaceStatusFunc``."""
        if (namespace.get("status") or {}).get("phase") == TERMINATING:
            return namespace
        updated = copy.deepcopy(namespace)
        updated.setdefault("status", {})["phase"] = TERMINATING
        return self.client.call("PUT", url(NAMESPACES, None, namespace["metadata"]["name"], "status"), updated)

    def _finalize(self, namespace: Obj) -> Obj:
        """``finalizeNamespace``: ``spec.finalizers`` without ours, as a sorted set, through ``/finalize``."""
        spec = namespace.get("spec") or {}
        finalizers = sorted({f for f in spec.get("finalizers") or [] if f != KUBERNETES_FINALIZER})
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": namespace["metadata"],
                "spec": {**spec, "finalizers": finalizers}}
        return self.client.call("PUT", url(NAMESPACES, None, namespace["metadata"]["name"], "finalize"), body)

    # --- deleteAllContent ----------------------------------------------------------------

    def _delete_all_content(self, namespace: Obj) -> int:
        """``deleteAllContent``: every resource emptied as far as it goes, the conditions written; the estimate of
        seconds until what remains is gone. Raises ``ContentError`` when discovery or a resource failed."""
        name = namespace["metadata"]["name"]
        deleted_at = parse_time(namespace["metadata"]["deletionTimestamp"])
        failing: list[Obj] = []
        resources, discovery_error = self._discover()
        if discovery_error:
            failing.append(_condition("NamespaceDeletionDiscoveryFailure", "DiscoveryFailed", discovery_error))
        estimate, remaining, errors = 0, {}, []
        for resource in resources:
            try:
                found = self._delete_resource(resource, name, deleted_at)
            except ContentError as exc:
                errors.append(str(exc))
                found = exc.remaining
            estimate = max(estimate, found.estimate)
            if found.count:
                remaining[resource] = found
        failing += content_conditions(remaining, errors)
        conditions, changed = updated_conditions((namespace.get("status") or {}).get("conditions") or [], failing)
        if changed:
            namespace.setdefault("status", {})["conditions"] = conditions
            try:
                self.client.call("PUT", url(NAMESPACES, None, name, "status"), namespace)
            except ApiError as exc:
                log.debug("couldn't update status condition for namespace %r: %s", name, exc)
        problems = ([discovery_error] if discovery_error else []) + errors
        if problems:
            raise ContentError("; ".join(problems), Remaining(estimate))
        return estimate

    def _discover(self) -> tuple[list[Discovered], str]:
        """``ServerPreferredNamespacedResources`` filtered to what can be deleted; a group whose version cannot be
        read is left out and named in the error (``ErrGroupDiscoveryFailed``), as the condition words it."""
        versions = [f"/api/{v}" for v in self.client.call("GET", "/api").get("versions") or []][:1]
        versions += [f"/apis/{g['preferredVersion']['groupVersion']}"
                     for g in self.client.call("GET", "/apis").get("groups") or []]
        found, failed = [], []
        for path in versions:
            group_version = path.split("/", 2)[2]
            try:
                listed = self.client.call("GET", path)
            except ApiError as exc:
                failed.append(f"{group_version}: {exc.message}")
                continue
            group, _, version = group_version.rpartition("/")
            found += [Discovered(group, version, r["name"], frozenset(r.get("verbs") or []))
                      for r in listed.get("resources") or []
                      if r.get("namespaced") and "/" not in r["name"] and "delete" in (r.get("verbs") or [])]
        error = ""
        if failed:
            error = (f"Discovery failed for some groups, {len(failed)} failing: unable to retrieve the complete list "
                     f"of server APIs: {', '.join(sorted(failed))}")
        return found, error

    def _delete_resource(self, resource: Discovered, namespace: str, deleted_at: datetime.datetime) -> Remaining:
        """``deleteAllContentForGroupVersionResource``: what remains of ``resource`` in ``namespace`` once its
        deletion was asked for."""
        try:
            estimate = self._estimate(resource, namespace, deleted_at)
        except ApiError as exc:
            raise ContentError(exc.message, Remaining()) from None
        path = url(resource.gvr, namespace)
        background = {"propagationPolicy": "Background"}  # never the orphan finalizer: everything goes
        try:
            if not self._delete_collection(resource, path, background):
                for item in self._list(resource, path) or []:
                    try:
                        self.client.call("DELETE", f"{path}/{item['metadata']['name']}", background)
                    except ApiError as exc:
                        if exc.code not in (404, 405):
                            raise
            items = self._list(resource, path)
        except ApiError as exc:
            raise ContentError(exc.message, Remaining(estimate)) from None
        if not items:  # emptied, or not listable
            return Remaining(estimate if items is None else 0)
        finalizers = Counter(f for item in items for f in item["metadata"].get("finalizers") or [])
        if estimate:
            return Remaining(estimate, len(items), finalizers)
        if finalizers:
            return Remaining(FINALIZER_ESTIMATE_SECONDS, len(items), finalizers)
        raise ContentError(f"unexpected items still remain in namespace: {namespace} for gvr: {resource}",
                           Remaining(estimate, len(items)))

    def _delete_collection(self, resource: Discovered, path: str, options: Obj) -> bool:
        """Whether the collection DELETE is supported (by discovery's verbs, then by the answer)."""
        if "deletecollection" not in resource.verbs:
            return False
        try:
            self.client.call("DELETE", path, options)
        except ApiError as exc:
            if exc.code in (404, 405):
                return False
            raise
        return True

    def _list(self, resource: Discovered, path: str) -> list[Obj] | None:
        """The objects of ``resource`` at ``path``; None when it cannot be listed."""
        if "list" not in resource.verbs:
            return None
        try:
            return list(self.client.call("GET", path).get("items") or [])
        except ApiError as exc:
            if exc.code in (404, 405):
                return None
            raise

    def _estimate(self, resource: Discovered, namespace: str, deleted_at: datetime.datetime) -> int:
        """``estimateGracefulTermination``: for pods, the longest grace period of those not finished, unless that
        long has passed since the namespace's deletion began; 0 for everything else."""
        if (resource.group, resource.plural) != ("", "pods"):
            return 0
        pods = self.client.call("GET", url(("", "v1", "pods"), namespace)).get("items") or []
        estimate = max([int((p.get("spec") or {}).get("terminationGracePeriodSeconds") or 0) for p in pods
                        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")], default=0)
        elapsed = datetime.datetime.now(datetime.UTC) - deleted_at
        return 0 if elapsed >= datetime.timedelta(seconds=estimate) else estimate
