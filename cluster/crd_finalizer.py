"""The apiextensions-apiserver's CRD finalizer (``pkg/controller/finalizer/crd_finalizer.go``) and what it serves.

Deleting a CustomResourceDefinition (``pkg/registry/customresourcedefinition/etcd.go``, ``REST.Delete``) does not
remove it at once: the apiserver adds the ``customresourcecleanup.apiextensions.k8s.io`` finalizer and a
``Terminating`` condition (``InstanceDeletionPending``). While it terminates its kind is still served, but no new
object may be created (405, "create not allowed while custom resource definition is terminating"). This
controller deletes every custom resource of it (each through the API, so their own finalizers hold them), then
removes the finalizer; the CRD goes, and its kind stops being served. Were a CRD's objects left behind, creating
the CRD again would bring them back.
"""

from __future__ import annotations

import contextlib

from cluster.admission import User
from cluster.apiserver import CRD_CLEANUP_FINALIZER as CLEANUP_FINALIZER
from cluster.apiserver import ApiServer
from cluster.controllers import Loop
from cluster.operators.base import url
from cluster.store import ApiError, Obj

CRDS = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
APIEXTENSIONS = User("system:apiserver", ("system:masters", "system:authenticated"))


def terminating(crd: Obj) -> bool:
    return bool((crd.get("metadata") or {}).get("deletionTimestamp"))


class CrdFinalizer(Loop):
    """Empties each terminating CRD, then lets it go; serves exactly the kinds whose CRD exists."""

    period = 0.5

    def __init__(self, api: ApiServer) -> None:
        super().__init__(api, APIEXTENSIONS)

    def reconcile(self) -> None:
        crds_resource = self.api.registry.get(*CRDS)
        assert crds_resource is not None
        for crd in list(self.store.items(crds_resource)):
            if terminating(crd) and CLEANUP_FINALIZER in (crd["metadata"].get("finalizers") or []):
                self._finalize(crd)
        # What is served first, then what is defined: a CRD is stored before its kind is served, so a kind served
        # in this snapshot whose CRD is not stored is one whose CRD is gone.
        served = [r for r in self.api.registry.all() if not r.builtin]
        defined = {(c["spec"]["group"], c["spec"]["names"]["plural"]) for c in self.store.items(crds_resource)}
        for resource in served:
            if (resource.group, resource.plural) not in defined:
                self.api.registry.remove_group_plural(resource.group, resource.plural)

    def _finalize(self, crd: Obj) -> None:
        spec = crd["spec"]
        served = [r for r in self.api.registry.all()
                  if not r.builtin and (r.group, r.plural) == (spec["group"], spec["names"]["plural"])]
        remaining = list(self.store.items(served[0])) if served else []
        for obj in remaining:
            meta = obj["metadata"]
            if meta.get("deletionTimestamp"):
                continue  # being deleted: its finalizers hold it
            with contextlib.suppress(ApiError):  # gone meanwhile
                self.client.call("DELETE", url((served[0].group, served[0].version, served[0].plural),
                                               meta.get("namespace"), meta["name"]),
                                 {"preconditions": {"uid": meta["uid"]}})
        if remaining:
            return
        kept = [f for f in crd["metadata"].get("finalizers") or [] if f != CLEANUP_FINALIZER]
        with contextlib.suppress(ApiError):
            self.client.patch(url(CRDS, None, crd["metadata"]["name"]),
                              {"metadata": {"finalizers": kept or None,
                                            "resourceVersion": crd["metadata"]["resourceVersion"]}})
