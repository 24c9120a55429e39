"""Slim, parsed views of pods and nodes: what the gate controller keeps of each API object.

The controller holds every pod of the cluster (100,000 is a normal size), so it keeps only the
fields its decisions read, parsed once per watch event: effective requests, host ports, the gang
key and the release bookkeeping annotations. Placement constraints (selector, affinity,
tolerations) are kept only while a pod is gated, because only gated pods are planned.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

import msgspec

from controller.capacity import allocatable, is_terminal, requests_of, with_pod_slot
from controller.predicates import (
    HOSTNAME_LABEL,
    HostPort,
    NodeInfo,
    certifiability,
    host_ports,
    one_member_per_node,
)
from gang import keys
from gang.adapters.base import child_name
from gang.adapters.table import adapter_for
from gang.kinds import INTERMEDIATE, split_api_version
from gang.resources import Resources

Obj = Mapping[str, Any]

# (namespace, group name, owner uid): the owner uid keeps two roots that share a group name apart.
GangKey = tuple[str, str, str]

# Pods that stay on their node whatever happens to workloads: DaemonSet pods and static (mirror) pods.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
_PERMANENT_OWNERS = ("DaemonSet", "Node")
# The parts of a pod spec the filters and the certifiability check read.
_PLACEMENT_FIELDS = ("nodeSelector", "affinity", "tolerations")
_CERTIFIABILITY_FIELDS = ("topologySpreadConstraints", "resourceClaims", "volumes")
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_OWNER_FIELDS = ("apiVersion", "kind", "name", "uid", "controller")  # what the owner walk reads of a reference
# A kubelet that cannot admit a pod bound to it fails it with this message prefix (reasons OutOfcpu, ...).
REJECTED_PREFIX = "Pod was rejected"


def parse_time(text: str | None) -> float:
    """RFC 3339 timestamp → epoch seconds (0 when absent or malformed: oldest first is the safe side)."""
    if not text:
        return 0.0
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _canonical(value: Any) -> str:
    """Canonical JSON (sorted keys) as a cache key; msgspec's encoder, ~10x json.dumps (one per gated-pod event)."""
    return msgspec.json.encode(value, order="sorted", enc_hook=str).decode()


def placement_key(spec: Obj, requests: Mapping[str, Decimal]) -> str:
    """Everything static feasibility depends on, as a cache key: members of every job with the same node
    constraints share it (preferred terms and pod affinity, which often name the job, are left out)."""
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    shown = {"nodeSelector": spec.get("nodeSelector") or {}, "tolerations": spec.get("tolerations") or [],
             "nodeAffinity": affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}}
    shown["resources"] = sorted(name for name, value in requests.items() if value > 0)
    return _canonical(shown)


#: PodScheduled=False with this reason: the apiserver's mark of a gated pod, which no scheduler has tried yet.
SCHEDULING_GATED = "SchedulingGated"
DEFAULT_SCHEDULER = "default-scheduler"  # what the apiserver defaults spec.schedulerName to
DISRUPTION_TARGET = "DisruptionTarget"  # the pod condition of a pod being preempted or evicted
_NONE: Mapping[str, str] = {}


@dataclass(frozen=True, slots=True)
class Expected:
    """One expected later member (an entry of the expected-members annotation, expanded to count 1)."""

    role: str
    usage: Resources  # requests plus the pod slot
    spec: Obj  # nodeSelector / tolerations / affinity, the shape of a pod spec
    key: str  # placement_key
    uncertifiable: str | None
    apart: bool = False  # required anti-affinity: one member of the gang per node
    # The child Job it will belong to, named as ``PodView.child`` names a pod's (a JobSet's "<replicated job>-<index>"),
    # when the announcement says how many members each child Job has; else "".
    child: str = ""


def parse_expected(text: str | None, group: str) -> tuple[Expected, ...]:
    """The expected-members annotation, one entry per member; malformed text means none.

    The webhook wrote it, so malformed text only comes from a hand edit; the gang then waits
    for its members to exist instead of reserving room for them.
    """
    if not text:
        return ()
    try:
        entries = json.loads(text)
        expanded: list[Expected] = []
        for entry in entries:
            spec = {
                "nodeSelector": entry.get("nodeSelector") or {},
                "tolerations": entry.get("tolerations") or [],
                "affinity": entry.get("affinity") or {},
            }
            requests = requests_of({"requests": entry.get("requests") or {}})
            member = Expected(
                role=str(entry.get("role") or "member"),
                usage=with_pod_slot(requests),
                spec=spec,
                key=placement_key(spec, requests),
                uncertifiable=certifiability(spec, labels={keys.POD_GROUP_LABEL: group}),
                apart=one_member_per_node(spec, {keys.POD_GROUP_LABEL: group}),
            )
            count, per_child = int(entry.get("count") or 0), int(entry.get("perChild") or 0)
            if per_child > 0:  # child Jobs <role>-0, <role>-1, ... of per_child members each
                expanded.extend(replace(member, child=child_name([member.role, str(i // per_child)]))
                                for i in range(count))
            else:
                expanded.extend([member] * count)
        return tuple(expanded)
    except (TypeError, ValueError, AttributeError, ArithmeticError):
        return ()


_REQUESTS: dict[tuple[Any, ...], tuple[Resources, Resources]] = {}  # per resources sections: pods of one template share
_REQUESTS_LIMIT = 4096


def _quantities(section: Any) -> tuple[tuple[str, Any], ...]:
    """A hashable copy of a requests/limits section (quantities are JSON strings; equal numbers parse equally)."""
    return tuple(section.items()) if section else ()


def _resources(obj: Obj) -> tuple[tuple[tuple[str, Any], ...], tuple[tuple[str, Any], ...]]:
    resources = obj.get("resources") or {}
    return _quantities(resources.get("requests")), _quantities(resources.get("limits"))


def _requests(spec: Obj) -> tuple[Resources, Resources]:
    """``requests_of(spec)`` and the usage with the pod slot, memoized on every field requests_of reads.

    Pods of one template share both dicts (and the planner's per-call caches key on them): never mutate them.
    """
    try:
        if "requests" in spec:
            raise TypeError("an expected-member description")
        key = (tuple(_resources(c) for c in spec.get("containers") or ()),
               tuple((c.get("restartPolicy"), _resources(c)) for c in spec.get("initContainers") or ()),
               _resources(spec), _quantities(spec.get("overhead")))
        found = _REQUESTS.get(key)
    except (TypeError, AttributeError):
        requests = requests_of(spec)
        return requests, with_pod_slot(requests)
    if found is None:
        requests = requests_of(spec)
        if len(_REQUESTS) >= _REQUESTS_LIMIT:
            _REQUESTS.clear()
        found = _REQUESTS[key] = (requests, with_pod_slot(requests))
    return found


def _int(text: Any) -> int:
    try:
        return int(text or 0)
    except (TypeError, ValueError):
        return 0


def _node_list(text: str | None) -> tuple[str, ...]:
    try:
        nodes = json.loads(text) if text else []
        return tuple(str(n) for n in nodes) if isinstance(nodes, list) else ()
    except ValueError:
        return ()


@dataclass(slots=True)
class PodView:
    """What the controller knows about one pod."""

    uid: str
    namespace: str
    name: str
    node: str  # spec.nodeName, "" while unbound
    terminal: bool
    failed: bool
    running: bool  # its kubelet admitted it and started its containers
    deleting: bool
    gates: tuple[str, ...]
    gang: GangKey | None
    min_available: int
    expected: tuple[Expected, ...]
    expected_text: str  # the raw annotation: first-stage members carry it, late members do not
    planned_node: str
    reserved_nodes: tuple[str, ...]
    unresolved: bool
    priority: int
    created: float
    usage: Resources
    ports: frozenset[HostPort]
    nominated: str
    permanent: bool
    owner: str
    spec: Obj | None  # placement fields, only while unbound
    key: str  # placement_key, only while unbound
    uncertifiable: str | None
    apart: bool = False  # required anti-affinity: one member of its gang per node (kept after the release too)
    rejected: str = ""  # the kubelet's reason and message when it refused to run the pod on its node
    unschedulable: bool = False  # PodScheduled=False: a scheduler tried and found no node (not: it was gated)
    pinned: bool = False  # required node affinity names exactly its planned node
    escapable: bool = False  # no gang labels, no gate, an owner toward a supported root (see walkable)
    admission: dict[str, Any] | None = None  # what admission decides on, kept for escapable pods while they are unbound
    priority_class: str = ""  # spec.priorityClassName of gang members (their PodGroup records it)
    role: str = ""  # a gang member's role, from its root kind's role label (per-role topology requests)
    child: str = ""  # the child Job a gang member belongs to, for kinds that have them (JobSet's exclusive topology)
    scheduler: str = DEFAULT_SCHEDULER  # spec.schedulerName
    labels: Mapping[str, str] = field(default_factory=dict)  # of pods that may be preempted (bound or released,
    # not DaemonSet or static pods): which PodDisruptionBudgets cover them
    preempts: bool = True  # spec.preemptionPolicy is not Never: it may preempt lower-priority pods
    disrupted: bool = False  # DisruptionTarget True: on its way out because of a preemption or an eviction

    @property
    def touched(self) -> bool:
        """A scheduler has looked at it: bound it, nominated a node, or found none (PodScheduled False)."""
        return bool(self.node or self.nominated or self.unschedulable)

    @property
    def gated(self) -> bool:
        return keys.GANG_GATE in self.gates

    @property
    def live(self) -> bool:
        """Counts toward min-available: neither finished nor on its way out."""
        return not self.terminal and not self.deleting

    @property
    def released(self) -> bool:
        """Released by the gate controller: it writes the planned node in the PATCH that removes the gate (the
        validating webhook lets nobody else write it); a gang member ungated by anyone else has escaped the gang."""
        return not self.gated and bool(self.planned_node) and self.gang is not None


def _rejection(status: Obj) -> str:
    """The kubelet's refusal to admit a pod bound to its node ("OutOfcpu: Pod was rejected: ..."), else ""."""
    message, reason = str(status.get("message") or ""), str(status.get("reason") or "")
    if status.get("phase") != "Failed" or not (message.startswith(REJECTED_PREFIX) or reason.startswith("OutOf")):
        return ""
    return f"{reason}: {message}" if reason else message


def _pinned_to(spec: Obj, node: str) -> bool:
    """Every required node-affinity term holds ``metadata.name In [node]``: the release pin (controller/release.py)."""
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(_REQUIRED) or {})
             .get("nodeSelectorTerms") or [])
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    return bool(node and terms) and all(pin in (term.get("matchFields") or []) for term in terms)


def walkable(owners: list[Any]) -> bool:
    """Some owner reference leads toward a supported root (a root kind, or a Job/StatefulSet/Pod between):
    a pod admission may have let through without its gang; Deployment, DaemonSet, ... pods never have one."""
    for ref in owners:
        if not isinstance(ref, dict):
            continue
        api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
        if (split_api_version(api_version)[0], kind) in INTERMEDIATE or adapter_for(api_version, kind) is not None:
            return True
    return False


def _admission_view(meta: Obj, spec: Obj) -> dict[str, Any]:
    """The pod as admission's decision reads it (labels, annotations, owners, node and scheduler name)."""
    kept_spec = {k: spec[k] for k in ("nodeName", "schedulerName") if spec.get(k)}
    kept_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "labels", "annotations")
                 if meta.get(k)}
    kept_meta["ownerReferences"] = [{k: ref[k] for k in _OWNER_FIELDS if k in ref}
                                    for ref in meta.get("ownerReferences") or () if isinstance(ref, dict)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": kept_meta, "spec": kept_spec}


def owner_parts(owner: str) -> tuple[str, str, str]:
    """(apiVersion, kind, name) from the owner annotation ``<group>/<version>/<kind>/<name>``."""
    group, _, rest = owner.partition("/")
    version, _, rest = rest.partition("/")
    kind, _, name = rest.partition("/")
    return (f"{group}/{version}" if group else version), kind, name


def _unit(owner: str, labels: Mapping[str, str]) -> dict[str, str]:
    """A member's role and child Job, read through its root kind's adapter."""
    api_version, kind, _ = owner_parts(owner)
    adapter = adapter_for(api_version, kind)
    if adapter is None:
        return {}
    return {"role": sys.intern(adapter.role_of(labels)), "child": adapter.child_of(labels)}


def pod_view(pod: Obj) -> PodView:
    """Parse one pod object (a dict as the API returns it)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    raw_gates = spec.get("schedulingGates")
    gates = tuple(str(g.get("name")) for g in raw_gates if isinstance(g, dict)) if raw_gates else ()
    group = labels.get(keys.POD_GROUP_LABEL) or ""
    owner_uid = annotations.get(keys.OWNER_UID_ANNOTATION) or ""
    namespace = meta.get("namespace") or ""
    requests, usage = _requests(spec)
    gated = keys.GANG_GATE in gates
    unresolved = keys.UNRESOLVED_ANNOTATION in annotations
    # A gated pod admission could not decide (its owner or PodGroup unread) is in no gang yet, whatever name label its
    # creator gave it: the resolver decides it again (controller/owners.py) and writes its gang's owner keys.
    gang = (namespace, group, owner_uid) if group and not (unresolved and gated) else None
    owners = meta.get("ownerReferences") or []
    expected_text = annotations.get(keys.EXPECTED_MEMBERS_ANNOTATION) or ""
    terminal = is_terminal(pod)
    unbound = not spec.get("nodeName") and not terminal
    planned = str(annotations.get(keys.PLANNED_NODE_ANNOTATION) or "")
    permanent = MIRROR_ANNOTATION in annotations or any(o.get("kind") in _PERMANENT_OWNERS for o in owners)
    escapable = not group and not gated and not terminal and not meta.get("deletionTimestamp") and not permanent \
        and walkable(owners)
    return PodView(
        uid=str(meta.get("uid") or f"{namespace}/{meta.get('name')}"),
        namespace=namespace,
        name=str(meta.get("name") or ""),
        node=str(spec.get("nodeName") or ""),
        terminal=terminal,
        failed=status.get("phase") == "Failed",
        running=status.get("phase") == "Running",
        deleting=bool(meta.get("deletionTimestamp")),
        gates=gates,
        gang=gang,
        min_available=_int(labels.get(keys.POD_GROUP_MIN_LABEL)),
        expected=parse_expected(expected_text, group) if gang else (),
        expected_text=expected_text,
        planned_node=planned,
        reserved_nodes=_node_list(annotations.get(keys.RESERVED_NODES_ANNOTATION)) if gang else (),
        unresolved=unresolved,
        priority=_int(spec.get("priority")),
        created=parse_time(meta.get("creationTimestamp")),
        usage=usage,
        ports=host_ports(spec),
        nominated=str(status.get("nominatedNodeName") or ""),
        permanent=permanent,
        owner=str(annotations.get(keys.OWNER_ANNOTATION) or ""),
        spec={field: spec[field] for field in _PLACEMENT_FIELDS + _CERTIFIABILITY_FIELDS if spec.get(field)}
        if unbound else None,
        key=placement_key(spec, requests) if unbound else "",
        uncertifiable=(certifiability(spec, labels={keys.POD_GROUP_LABEL: group} if group else labels,
                                      pod_name=meta.get("name"))
                       if gated else None),
        apart=bool(group) and one_member_per_node(spec, {keys.POD_GROUP_LABEL: group}),
        rejected=_rejection(status),
        unschedulable=any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                          and c.get("reason") != SCHEDULING_GATED
                          for c in status.get("conditions") or [] if isinstance(c, dict)),
        pinned=unbound and _pinned_to(spec, planned),
        escapable=escapable,
        admission=_admission_view(meta, spec) if escapable and unbound else None,
        priority_class=sys.intern(str(spec.get("priorityClassName") or "")) if gang else "",
        scheduler=sys.intern(str(spec.get("schedulerName") or DEFAULT_SCHEDULER)),
        labels=labels if (spec.get("nodeName") or planned) and not permanent and isinstance(labels, dict) else _NONE,
        preempts=spec.get("preemptionPolicy") != "Never",
        disrupted=any(c.get("type") == DISRUPTION_TARGET and c.get("status") == "True"
                      for c in status.get("conditions") or [] if isinstance(c, dict)),
        **(_unit(str(annotations.get(keys.OWNER_ANNOTATION) or ""), labels) if gang else {}),
    )


@dataclass(slots=True)
class NodeView:
    """A node as the filters see it and its allocatable."""

    name: str
    info: NodeInfo
    allocatable: Resources
    shape: str  # changes exactly when static feasibility may change
    kind: str  # the shape without name and hostname label: equal kinds pass the name-blind filters alike


def node_view(node: Obj) -> NodeView:
    alloc = allocatable(node)
    info = NodeInfo.of(node, alloc)
    kind = _canonical(info.look())
    return NodeView(name=info.name, info=info, allocatable=alloc,
                    shape=_canonical([info.name, info.labels.get(HOSTNAME_LABEL)]) + kind, kind=kind)
