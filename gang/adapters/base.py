"""The one interface every workload adapter implements (Kueue's integration pattern).

An adapter knows one root kind: from the root object (and the owner chain between it and
the pod) it says which gang the pod belongs to, how big the gang is, and which members are
created later. It never talks to the API and never mutates anything.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gang.kinds import Kind, split_api_version
from gang.resources import format_requests, pod_requests

Obj = dict[str, Any]


@dataclass(frozen=True)
class ExpectedMember:
    """Members still to come, as a first-stage pod announces them to the gate controller."""

    role: str
    count: int
    requests: Mapping[str, str]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Any, ...] = ()
    affinity: Mapping[str, Any] | None = None
    # Members per child Job, for kinds whose later members come in child Jobs (a JobSet's replicated job): the
    # gate controller keeps each child Job's slots together for JobSet's exclusive topology. 0: no child Jobs.
    per_child: int = 0

    def as_json(self) -> dict[str, Any]:
        found = {
            "role": self.role,
            "count": self.count,
            "requests": dict(self.requests),
            "nodeSelector": dict(self.node_selector),
            "tolerations": list(self.tolerations),
            "affinity": dict(self.affinity) if self.affinity else None,
        }
        return {**found, "perChild": self.per_child} if self.per_child else found


@dataclass(frozen=True)
class Membership:
    """An adapter's answer for one pod.

    ``size`` is the gang size the workload asks for, later members included; ``pods`` is how
    many pods its spec creates when an operator-level minimum makes the two differ.
    """

    member: bool
    reason: str
    group: str = ""
    size: int = 0
    late: bool = False
    expected: tuple[ExpectedMember, ...] = ()
    pods: int = 0

    @property
    def pod_total(self) -> int:
        return self.pods or self.size


def not_member(reason: str) -> Membership:
    return Membership(member=False, reason=reason)


class Chain:
    """The pod's owners, nearest first; the last one is the root."""

    def __init__(self, objects: list[Obj]) -> None:
        self.objects = objects

    @property
    def root(self) -> Obj:
        return self.objects[-1]

    def find(self, group: str, kind: str) -> Obj | None:
        """The nearest owner of that kind (e.g. the JobSet of a TrainJob)."""
        for obj in self.objects:
            if obj.get("kind") == kind and split_api_version(str(obj.get("apiVersion", "")))[0] == group:
                return obj
        return None


class WorkloadAdapter(ABC):
    """One root kind. Subclasses are small; shared arithmetic lives in the helpers below."""

    kind: Kind
    # None: any version of the kind; otherwise the versions this adapter serves.
    api_versions: tuple[str, ...] | None = None
    # Owner kinds reached from this kind's objects through a reference *without*
    # ``controller: true`` because the operator never sets the flag.
    non_controller_owners: frozenset[tuple[str, str]] = frozenset()
    # The fields of the root's ``spec`` this adapter reads (a TypedDict built from gang/shapes.py): the owner cache
    # decodes objects of its kind with only these (gang/slim.py). None: it reads no spec field.
    spec_shape: type | None = None
    # The pod label naming a member's role (as expected members name theirs), for per-role topology requests
    # (``kubenexus.io/topology-required.<role>``); None: the kind has no roles.
    role_label: str | None = None
    # The pod labels that together name the child Job a member belongs to (JobSet's exclusive topology).
    child_labels: tuple[str, ...] = ()

    def role_of(self, labels: Mapping[str, str]) -> str:
        """The member's role ("" when the kind has none or the pod does not say)."""
        return str(labels.get(self.role_label) or "") if self.role_label else ""

    def roles(self, root: Obj) -> frozenset[str] | None:
        """The roles the root's members have (the values of ``role_label``), for checking per-role requests at apply
        time; None when the kind has roles its spec does not name."""
        return None

    def child_of(self, labels: Mapping[str, str]) -> str:
        """The child Job the member belongs to ("" when the kind has none or the pod does not say)."""
        parts = [str(labels.get(label) or "") for label in self.child_labels]
        return child_name(parts) if parts and all(parts) else ""

    @abstractmethod
    def membership(self, pod: Obj, chain: Chain) -> Membership:
        """Which gang ``pod`` belongs to, given its owner chain (root last)."""

    @abstractmethod
    def pod_count(self, root: Obj) -> int | None:
        """How many pods the root's spec creates, or None when the spec does not say."""

    def native_scheduler(self, root: Obj) -> str | None:
        """A reason when the root uses an operator-native gang scheduler we must not fight."""
        return None

    def created(self, root: Obj) -> list[Obj] | None:
        """What the operator creates right after ``root`` is submitted (its first stage): the pods, as far as
        admission and planning read them (name or generateName, labels, owner references, the pod spec), after any
        owner objects between them and the root (a JobSet's Jobs, with a uid of their own); no namespace. Called
        on whole objects, never the owner cache's slim ones. ``kubenexus simulate`` runs the pods through admission
        ("what if I submit this job"); ``tests/test_created.py`` checks everything against the emulated operators.
        None: not modelled."""
        return None


# --- helpers shared by adapters -------------------------------------------------------


def spec(obj: Obj | None) -> Obj:
    value = (obj or {}).get("spec")
    return value if isinstance(value, dict) else {}


def name_of(obj: Obj | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("name") or "")


def labels_of(obj: Obj | None) -> dict[str, str]:
    value = ((obj or {}).get("metadata") or {}).get("labels")
    return value if isinstance(value, dict) else {}


def as_int(value: Any, default: int) -> int:
    """An integer field of a spec; absent, malformed or negative values give ``default``."""
    if isinstance(value, bool) or value is None:
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return number if number >= 0 else default


def mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def child_name(parts: Sequence[str]) -> str:
    """A child Job's name as the gate controller knows it: its ``child_labels`` values (a JobSet's replicated job
    and job index), joined; expected members of a later child Job are named alike."""
    return "-".join(parts)


def expected_from_template(role: str, count: int, template: Any, per_child: int = 0) -> ExpectedMember:
    """Expected members stamped from a pod template (JobSet, MPI launcher, LWS workers); ``per_child``: see
    ``ExpectedMember``."""
    pod_spec = spec(mapping(template))
    return ExpectedMember(
        role=role,
        count=count,
        requests=format_requests(pod_requests(pod_spec)),
        node_selector=mapping(pod_spec.get("nodeSelector")),
        tolerations=tuple(pod_spec.get("tolerations") or ()),
        affinity=mapping(pod_spec.get("affinity")) or None,
        per_child=per_child,
    )


def job_pods(job_spec: Obj) -> int:
    """Pods a batch Job runs at once: min(parallelism (default 1), completions)."""
    parallelism = as_int(job_spec.get("parallelism"), 1)
    completions = job_spec.get("completions")
    return parallelism if completions is None else min(parallelism, as_int(completions, parallelism))


def controller_ref(owner: Obj) -> Obj:
    """The owner reference an operator sets on what it creates (metav1.NewControllerRef)."""
    meta = mapping(owner.get("metadata"))
    return {"apiVersion": owner.get("apiVersion"), "kind": owner.get("kind"), "name": meta.get("name"),
            "uid": meta.get("uid"), "controller": True, "blockOwnerDeletion": True}


def template_pod(template: Any, pod_labels: Mapping[str, str], owner: Obj, *, name: str = "",
                 generate_name: str = "") -> Obj:
    """A pod stamped from a pod template as controller.GetPodFromTemplate does: the template's labels and
    annotations, the operator's labels on top, owned by ``owner``."""
    template_meta = mapping(mapping(template).get("metadata"))
    meta: Obj = {"labels": {**mapping(template_meta.get("labels")), **pod_labels},
                 "ownerReferences": [controller_ref(owner)]}
    if template_meta.get("annotations"):
        meta["annotations"] = dict(mapping(template_meta.get("annotations")))
    if template_meta.get("finalizers"):
        meta["finalizers"] = list(template_meta["finalizers"])
    if name:
        meta["name"] = name
    if generate_name:
        meta["generateName"] = generate_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": copy.deepcopy(spec(mapping(template)))}
