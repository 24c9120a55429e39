"""The one interface every emulated operator implements, and the helpers they share.

An ``Operator`` is a ``Loop`` with its own service-account identity that reconciles every object of
one root resource. It reads the store (its informer cache) and writes only through the apiserver's
REST layer, so admission webhooks, defaulting and validation apply to each child it creates exactly
as to a real operator's API calls. Children are found again by owner uid and name, never remembered,
so a reconcile is idempotent and a restarted operator adopts what exists.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import random
import time
from typing import Any, ClassVar

from cluster.admission import User
from cluster.apiserver import ApiServer
from cluster.controllers import Loop
from cluster.resources import Resource
from cluster.store import ApiError, Obj, now

log = logging.getLogger("kubenexus.cluster.operators")

GVR = tuple[str, str, str]  # group, version, plural
PODS: GVR = ("", "v1", "pods")
JOBS: GVR = ("batch", "v1", "jobs")
STATEFULSETS: GVR = ("apps", "v1", "statefulsets")
_SAFE = "bcdfghjklmnpqrstvwxz2456789"  # k8s rand.String / SafeEncodeString alphabet


def service_account(namespace: str, name: str) -> User:
    return User(f"system:serviceaccount:{namespace}:{name}",
                ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"))


def owner_ref(owner: Obj, controller: bool = True, block: bool = True) -> Obj:
    """metav1.NewControllerRef (both flags) by default; ``controller=False`` leaves the flag out."""
    meta = owner["metadata"]
    ref: Obj = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"]}
    if controller:
        ref["controller"] = True
    if block:
        ref["blockOwnerDeletion"] = True
    return ref


def controlled_by(obj: Obj, owner: Obj) -> bool:
    uid = owner["metadata"]["uid"]
    return any(r.get("uid") == uid and r.get("controller") for r in obj["metadata"].get("ownerReferences") or [])


def controller_of(obj: Obj) -> Obj | None:
    return next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


def labels(obj: Obj) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def phase(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase", "Pending")


def alive(obj: Obj) -> bool:
    return not obj["metadata"].get("deletionTimestamp")


def pod_ready(pod: Obj) -> bool:
    """The Ready condition, as the kubelet reports it."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return phase(pod) == "Running" and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def random_suffix(n: int = 5) -> str:
    return "".join(random.choices(_SAFE, k=n))


def stable_hash(value: Any, n: int = 10) -> str:
    """A short deterministic hash in the apiserver's safe alphabet (like controller-revision hashes)."""
    digest = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).digest()
    return "".join(_SAFE[b % len(_SAFE)] for b in digest[:n])


def url(gvr: GVR, namespace: str | None, name: str = "", sub: str = "") -> str:
    group, version, plural = gvr
    path = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{plural}"
    for part in (name, sub):
        if part:
            path += f"/{part}"
    return path


def with_condition(conditions: list[Obj] | None, type_: str, status: str, reason: str, message: str = "") -> list[Obj]:
    """``conditions`` with ``type_`` at ``status``; unchanged (equal) when it already is, so no write follows."""
    current = list(conditions or [])
    if any(c.get("type") == type_ and c.get("status") == status for c in current):
        return current
    stamp = now()
    new = {"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": stamp, "lastUpdateTime": stamp}
    return [c for c in current if c.get("type") != type_] + [new]


class Operator(Loop):
    """Reconciles every live object of ``root`` with ``sync``; ``identity`` is (namespace, service account)."""

    root: ClassVar[GVR]
    identity: ClassVar[tuple[str, str]]
    coalesce = 0.2  # operators react within a fifth of a second; bursts cost one pass

    def __init__(self, api: ApiServer) -> None:
        super().__init__(api, service_account(*self.identity))
        self._reported: dict[tuple[str, str], str] = {}  # (owner uid, reason) -> last event message

    # --- the loop ----------------------------------------------------------------------

    def roots(self) -> list[Obj]:
        return [o for o in self.items(self.root) if alive(o)]

    def reconcile(self) -> None:
        for obj in self.roots():
            try:
                self.sync(obj)
            except ApiError as exc:  # a conflict or refusal: the next pass retries, the others go on
                log.debug("%s: %s/%s: %s", self.name, obj["metadata"].get("namespace"), obj["metadata"]["name"], exc)
            except Exception as exc:  # a malformed object: say so on it, and keep serving the others
                self.event(obj, "ReconcileError", f"{type(exc).__name__}: {exc}")

    def sync(self, obj: Obj) -> None:
        raise NotImplementedError

    # --- reads (the informer cache) ----------------------------------------------------

    def served(self, gvr: GVR) -> Resource | None:
        return self.api.registry.get(*gvr)

    def items(self, gvr: GVR, namespace: str | None = None) -> list[Obj]:
        resource = self.served(gvr)
        if resource is None:  # CRD not installed (yet): the operator idles, as a real one would
            return []
        found = self.store.items(resource)
        return found if namespace is None else [o for o in found if o["metadata"].get("namespace") == namespace]

    def children(self, gvr: GVR, owner: Obj) -> list[Obj]:
        """Objects whose controller is ``owner`` (by uid), in ``owner``'s namespace."""
        return [o for o in self.items(gvr, owner["metadata"]["namespace"]) if controlled_by(o, owner)]

    def get(self, gvr: GVR, namespace: str, name: str) -> Obj | None:
        return next((o for o in self.items(gvr, namespace) if o["metadata"]["name"] == name), None)

    # --- writes ------------------------------------------------------------------------

    def create(self, gvr: GVR, owner: Obj, obj: Obj, client: Any = None) -> Obj | None:
        """POST ``obj`` into ``owner``'s namespace; a refusal becomes a FailedCreate event on ``owner``."""
        namespace = owner["metadata"]["namespace"]
        try:
            return (client or self.client).create(url(gvr, namespace), obj)
        except ApiError as exc:
            if exc.code != 409:
                self.event(owner, "FailedCreate", f"Error creating: {exc.message}")
            return None

    def patch_status(self, gvr: GVR, obj: Obj, status: Obj) -> None:
        """Merge-patch the status subresource, only with fields that differ (a no-op writes nothing)."""
        current = obj.get("status") or {}
        changed = {k: v for k, v in status.items() if current.get(k) != v}
        if changed:
            meta = obj["metadata"]
            self.client.patch(url(gvr, meta.get("namespace"), meta["name"], "status"), {"status": changed})

    def delete(self, gvr: GVR, obj: Obj, propagation: str | None = None, grace: int | None = None) -> None:
        """DELETE ``obj`` with its uid as precondition (never a namesake created since); one already being deleted
        (unless ``grace`` shortens it), or gone, is left alone."""
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and grace is None:
            return
        options: Obj = {"preconditions": {"uid": meta["uid"]}}
        if propagation:
            options["propagationPolicy"] = propagation
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        with contextlib.suppress(ApiError):  # gone meanwhile: the next pass sees it
            self.client.call("DELETE", url(gvr, meta.get("namespace"), meta["name"]), options)

    def clean_pods(self, pods: list[Obj], policy: str) -> None:
        """Kubeflow's ``cleanPodPolicy`` on a finished job: All deletes every pod, Running those still running or
        pending, None none."""
        for pod in pods:
            if policy == "All" or (policy == "Running" and phase(pod) in ("Running", "Pending")):
                self.delete(PODS, pod)

    def patch_labels(self, gvr: GVR, obj: Obj, new: dict[str, str]) -> None:
        meta = obj["metadata"]
        self.client.patch(url(gvr, meta.get("namespace"), meta["name"]), {"metadata": {"labels": new}})

    def event(self, obj: Obj, reason: str, message: str, type_: str = "Warning") -> None:
        """An Event on ``obj``, once per distinct message (a controller's recorder, without the spam)."""
        meta = obj["metadata"]
        key = (meta["uid"], reason)
        if self._reported.get(key) == message:
            return
        self._reported[key] = message
        with contextlib.suppress(ApiError):  # events are best effort
            self.client.create(url(("", "v1", "events"), meta["namespace"]), {
                "metadata": {"name": f"{meta['name']}.{time.time_ns():x}"},  # client-go's recorder naming
                "involvedObject": {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"],
                                   "namespace": meta["namespace"], "uid": meta["uid"]},
                "reason": reason, "message": message, "type": type_, "count": 1,
                "source": {"component": self.identity[1]}, "firstTimestamp": now(), "lastTimestamp": now()})


def pod_from_template(template: Obj, labels_: dict[str, str], owners: list[Obj], *, name: str | None = None,
                      generate_name: str | None = None, annotations: dict[str, str] | None = None) -> Obj:
    """A pod as controller.GetPodFromTemplate builds it: template labels/annotations first, the controller's on
    top; no namespace (the request URL carries it)."""
    meta = json.loads(json.dumps(template.get("metadata") or {}))
    pod_meta: Obj = {"labels": {**(meta.get("labels") or {}), **labels_},
                     "annotations": {**(meta.get("annotations") or {}), **(annotations or {})},
                     "ownerReferences": owners}
    if meta.get("finalizers"):
        pod_meta["finalizers"] = meta["finalizers"]
    if not pod_meta["annotations"]:
        del pod_meta["annotations"]
    if name:
        pod_meta["name"] = name
    if generate_name:
        pod_meta["generateName"] = generate_name
    spec = json.loads(json.dumps(template.get("spec") or {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}
