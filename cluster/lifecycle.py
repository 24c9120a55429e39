"""A namespace's life as the apiserver rules it: the NamespaceLifecycle admission plugin and the namespace registry.

- NamespaceLifecycle (``staging/src/k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle/admission.go``, once
  ``plugin/pkg/admission/namespace/lifecycle/admission.go``), the first mutating admission plugin: the immortal
  namespaces (default, kube-system, kube-public) may not be deleted (403); any other write to a namespaced object,
  DELETE excepted, in a namespace that does not exist is refused with that namespace's 404; a CREATE (a binding or
  an eviction too) in a namespace whose phase is Terminating is refused with 403 and the ``NamespaceTerminating``
  cause. Upstream looks the namespace up in an informer cache, waits 50 ms for a missing one, then reads it live;
  the emulator reads its store, which is never stale.
- The namespace registry (``pkg/registry/core/namespace/strategy.go``, ``storage/storage.go``): a new namespace is
  Active and carries the ``kubernetes`` finalizer in ``spec.finalizers`` (``PrepareForCreate``), which only the
  ``finalize`` subresource changes. The first DELETE only marks it (``deletionTimestamp``, phase Terminating, the
  ``orphan``/``foregroundDeletion`` finalizers as the options say); the namespace controller
  (``cluster/namespaces.py``) empties it and removes ``kubernetes``, and the namespace goes with its last finalizer
  (``ShouldDeleteNamespaceDuringUpdate``, ``cluster/store.py``). A later DELETE changes nothing while
  ``spec.finalizers`` is not empty, and is an ordinary deletion once it is.
"""

from __future__ import annotations

from collections.abc import Callable

from cluster.admission import Request
from cluster.deletion import FOREGROUND, ORPHAN
from cluster.resources import Resource
from cluster.store import ApiError, Obj, not_found

#: ``metav1.NamespaceDefault``, ``NamespaceSystem``, ``NamespacePublic``: what the plugin is registered with
IMMORTAL = ("default", "kube-system", "kube-public")
KUBERNETES_FINALIZER = "kubernetes"  # ``api.FinalizerKubernetes``, the namespace controller's token
TERMINATING = "Terminating"
TERMINATING_CAUSE = "NamespaceTerminating"  # ``v1.NamespaceTerminatingCause``


def is_namespace(resource: Resource) -> bool:
    return (resource.group, resource.kind) == ("", "Namespace")


def _qualified(resource: Resource) -> str:
    """``GroupResource.String()``: the plural, dotted with its group unless core."""
    return f"{resource.plural}.{resource.group}" if resource.group else resource.plural


def _forbidden(resource: Resource, name: str, why: str) -> ApiError:
    """``apierrors.NewForbidden(resource, name, err)``."""
    return ApiError(403, "Forbidden", f'{_qualified(resource)} "{name}" is forbidden: {why}',
                    {"name": name, "group": resource.group, "kind": resource.plural})


def admit(req: Request, namespaces: Resource, lookup: Callable[[str], Obj | None]) -> None:
    """``Lifecycle.Admit``; ``lookup`` reads a namespace by name (None: there is none)."""
    if is_namespace(req.resource):
        if req.operation == "DELETE" and req.name in IMMORTAL:
            raise _forbidden(req.resource, req.name, "this namespace may not be deleted")
        return  # every other operation on namespaces is allowed
    if not req.resource.namespaced or not req.namespace or req.operation == "DELETE":
        return
    namespace = lookup(req.namespace)
    if namespace is None:
        raise not_found(namespaces, req.namespace)
    if req.operation != "CREATE" or (namespace.get("status") or {}).get("phase") != TERMINATING:
        return
    meta = (req.obj or {}).get("metadata") or {}  # extractResourceName: the object's name, else its generateName
    name = meta.get("name") or meta.get("generateName") or "Unknown"
    refused = _forbidden(req.resource, name, f"unable to create new content in namespace {req.namespace} because "
                                             "it is being terminated")
    assert refused.details is not None
    refused.details["causes"] = [{"reason": TERMINATING_CAUSE, "field": "metadata.namespace",
                                  "message": f"namespace {req.namespace} is being terminated"}]
    raise refused


def prepare_for_create(namespace: Obj) -> None:
    """``namespaceStrategy.PrepareForCreate``: the status is Active whatever was sent, and ``spec.finalizers``
    includes ``kubernetes``."""
    namespace["status"] = {"phase": "Active"}
    spec = namespace.get("spec")
    if not isinstance(spec, dict):
        spec = namespace["spec"] = {}
    given = spec.get("finalizers")
    finalizers = given if isinstance(given, list) else []
    if KUBERNETES_FINALIZER not in finalizers:
        spec["finalizers"] = [*finalizers, KUBERNETES_FINALIZER]


def mark_terminating(options: Obj) -> Callable[[Obj], None]:
    """The change the namespace registry's first Delete makes (``deletionTimestamp`` is the store's): phase
    Terminating, and ``orphan``/``foregroundDeletion`` in ``metadata.finalizers`` as ``shouldHaveOrphanFinalizer``
    and ``shouldHaveDeleteDependentsFinalizer`` decide from the options (``orphanDependents: false`` means
    foreground here), else as the namespace already has them."""
    orphan_option, policy = options.get("orphanDependents"), options.get("propagationPolicy")

    def change(namespace: Obj) -> None:
        namespace.setdefault("status", {})["phase"] = TERMINATING
        meta = namespace["metadata"]
        current = list(meta.get("finalizers") or [])
        if orphan_option is not None:
            wanted = {ORPHAN: bool(orphan_option), FOREGROUND: not orphan_option}
        elif policy is not None:
            wanted = {ORPHAN: policy == "Orphan", FOREGROUND: policy == "Foreground"}
        else:
            wanted = {ORPHAN: ORPHAN in current, FOREGROUND: FOREGROUND in current}
        kept = [f for f in current if f not in wanted] + [f for f in (ORPHAN, FOREGROUND) if wanted[f]]
        if set(kept) != set(current):
            meta["finalizers"] = kept
            if not kept:
                del meta["finalizers"]

    return change
