"""The resource types the emulated apiserver serves: built-ins, plus custom resources from CRDs."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PrinterColumn:
    """One of a CRD version's ``additionalPrinterColumns`` (``cluster.tables`` prints it)."""

    name: str
    type: str
    json_path: str
    format: str = ""
    priority: int = 0
    description: str = ""


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    builtin: bool = True
    field_selectors: tuple[str, ...] = field(default=("metadata.name", "metadata.namespace"))
    stored: bool = True  # False: a review, created (answered) and never stored, like SubjectAccessReview
    columns: tuple[PrinterColumn, ...] = ()  # a custom resource's additionalPrinterColumns (this version's)
    # A custom resource's openAPIV3Schema (this version's): pruning and validation (cluster/validation/schema.py)
    schema: Any = field(default=None, compare=False, hash=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()


_POD_FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase", "spec.schedulerName")

BUILTIN = (
    Resource("", "v1", "Namespace", "namespaces", namespaced=False, short_names=("ns",),
             subresources=("status", "finalize")),
    Resource("", "v1", "Node", "nodes", namespaced=False, short_names=("no",), subresources=("status",)),
    Resource("", "v1", "Pod", "pods", short_names=("po",), subresources=("status", "binding", "eviction"),
             field_selectors=_POD_FIELDS),
    Resource("", "v1", "Event", "events", short_names=("ev",),
             field_selectors=("metadata.name", "metadata.namespace", "involvedObject.name", "involvedObject.kind",
                              "involvedObject.namespace", "involvedObject.apiVersion", "involvedObject.fieldPath",
                              "involvedObject.resourceVersion", "source",
                              "involvedObject.uid", "reason", "type")),
    Resource("", "v1", "Secret", "secrets"),
    Resource("", "v1", "ConfigMap", "configmaps", short_names=("cm",)),
    Resource("", "v1", "Service", "services", short_names=("svc",), subresources=("status",)),
    Resource("", "v1", "ServiceAccount", "serviceaccounts", short_names=("sa",)),
    # The same objects as core/v1 Events, another view of them (cluster/events.py): stored once, as core/v1.
    Resource("events.k8s.io", "v1", "Event", "events", short_names=("ev",),
             field_selectors=("metadata.name", "metadata.namespace", "regarding.kind", "regarding.namespace",
                              "regarding.name", "regarding.uid", "regarding.apiVersion", "regarding.resourceVersion",
                              "regarding.fieldPath", "reportingController", "source", "reason", "type")),
    Resource("coordination.k8s.io", "v1", "Lease", "leases"),
    Resource("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", namespaced=False, short_names=("pc",)),
    Resource("batch", "v1", "Job", "jobs", subresources=("status",)),
    # Stored and served (a real apiserver does); no CronJob controller runs here.
    Resource("batch", "v1", "CronJob", "cronjobs", short_names=("cj",), subresources=("status",)),
    Resource("apps", "v1", "StatefulSet", "statefulsets", short_names=("sts",), subresources=("status",)),
    # The disruption controller keeps PodDisruptionBudgets' status (cluster/disruption.py).
    Resource("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", short_names=("pdb",),
             subresources=("status",)),
    # No controllers act on these (no ReplicaSets or pods from Deployments, no network policy enforcement); they are
    # served so that the product's manifests (deploy/) apply as to a real cluster.
    # RBAC objects are what LocalCluster.enforce_rbac evaluates (cluster/rbac.py).
    Resource("apps", "v1", "Deployment", "deployments", short_names=("deploy",), subresources=("status",)),
    Resource("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", short_names=("netpol",)),
    Resource("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False),
    Resource("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False),
    Resource("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    Resource("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
    Resource("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration",
             "mutatingwebhookconfigurations", namespaced=False),
    Resource("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration",
             "validatingwebhookconfigurations", namespaced=False),
    Resource("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions",
             namespaced=False, short_names=("crd", "crds"), subresources=("status",)),
    # Create-only: the answer of the apiserver's authorizers (here: system:masters and RBAC, cluster/rbac.py).
    Resource("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", namespaced=False,
             stored=False),
)


def _columns(version: dict[str, Any]) -> tuple[PrinterColumn, ...]:
    return tuple(PrinterColumn(name=str(c.get("name", "")), type=str(c.get("type", "string")),
                               json_path=str(c.get("jsonPath", "")), format=str(c.get("format") or ""),
                               priority=int(c.get("priority") or 0), description=str(c.get("description") or ""))
                 for c in version.get("additionalPrinterColumns") or [] if isinstance(c, dict))


def from_crd(crd: dict[str, Any]) -> list[Resource]:
    """The resources a CustomResourceDefinition serves: one per served version, each with that version's
    subresources and additionalPrinterColumns (apiextensions.k8s.io/v1 sets them per version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    return [
        Resource(
            group=spec["group"], version=v["name"], kind=names["kind"], plural=names["plural"],
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            subresources=tuple(sorted((v.get("subresources") or {}).keys())), builtin=False, columns=_columns(v),
            schema=(v.get("schema") or {}).get("openAPIV3Schema") if isinstance(v.get("schema"), dict) else None,
        )
        for v in spec.get("versions") or [] if v.get("served", True)
    ]


class Registry:
    """What is served right now; CRDs add and remove entries at run time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._resources: dict[tuple[str, str, str], Resource] = {}
        for resource in BUILTIN:
            self.add(resource)

    def add(self, resource: Resource) -> None:
        with self._lock:
            self._resources[(resource.group, resource.version, resource.plural)] = resource

    def replace_group_plural(self, group: str, plural: str, resources: list[Resource]) -> None:
        """Serve ``resources`` instead of whatever this group and plural were (one step: never unserved)."""
        with self._lock:
            for key in [k for k in self._resources if k[0] == group and k[2] == plural]:
                del self._resources[key]
            for resource in resources:
                self._resources[(resource.group, resource.version, resource.plural)] = resource

    def remove_group_plural(self, group: str, plural: str) -> None:
        with self._lock:
            for key in [k for k in self._resources if k[0] == group and k[2] == plural]:
                del self._resources[key]

    def get(self, group: str, version: str, plural: str) -> Resource | None:
        with self._lock:
            return self._resources.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> Resource | None:
        group, _, version = api_version.rpartition("/")
        with self._lock:
            for resource in self._resources.values():
                if resource.group == group and resource.version == version and resource.kind == kind:
                    return resource
        return None

    def all(self) -> list[Resource]:
        with self._lock:
            return list(self._resources.values())
