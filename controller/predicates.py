"""kube-scheduler's static Filter plugins, one small filter per constraint, for the gate controller's planner.

A plan is only a witness that the gang fits if every member passes the same filters the scheduler will run, so
each filter here follows the scheduler's code and wording. Every filter is one object behind ``Filter``: a name
and ``filter(pod, node)``, None when the node passes, else an ``Unfit`` with the reason. ``FILTERS`` lists them in
the order the scheduler runs them, so the first reason is the scheduler's.

The filters are static: they read only what ``NodeInfo`` holds of a node (never what runs on it), so nodes with
equal ``NodeInfo.look()`` pass them alike for a pod that does not name nodes, and the engine evaluates them once
per node kind. A filter that reads another node field must add it to ``NodeInfo`` and to its look. Free capacity
(the pod slot included) and host ports in use change with every placement: they are the planner's to check, over
the whole plan (``controller/problem.py``). The pod is a ``PodInfo``: a pod spec or an expected-member description
(the entries of ``scheduling.kubenexus.io/expected-members``: ``requests``, ``nodeSelector``, ``tolerations``,
``affinity``, the same keys as a pod spec) parsed once for many nodes.

Constraints the scheduler evaluates against other pods or other API objects are not filters: ``certifiability``
names them so that the caller can hold the gang.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from controller.capacity import allocatable, requests_of
from gang import keys
from gang.selectors import int64, label_matches, label_requirement

__all__ = [
    "ANY_HOST_IP",
    "FILTERS",
    "HOSTNAME_LABEL",
    "TAINT_NOT_READY",
    "TAINT_UNREACHABLE",
    "TAINT_UNSCHEDULABLE",
    "Filter",
    "NodeAffinity",
    "NodeInfo",
    "NodeReadiness",
    "NodeResourcesFit",
    "NodeUnschedulable",
    "PodInfo",
    "TaintToleration",
    "Unfit",
    "certifiability",
    "feasible",
    "gang_member_port",
    "host_port_conflict",
    "host_ports",
    "is_gang_member_port",
    "normalize_port",
    "one_member_per_node",
    "ports_clash",
    "requirement_text",
    "taint_text",
    "tolerates",
    "unfit",
    "untolerated",
]

Obj = Mapping[str, Any]
HostPort = tuple[str, int, str]

TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
HOSTNAME_LABEL = "kubernetes.io/hostname"
ANY_HOST_IP = "0.0.0.0"

UNSCHEDULABLE = "node(s) were unschedulable"
NOT_READY = "node(s) were not ready"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"

_FILTERED_EFFECTS = ("NoSchedule", "NoExecute")  # TaintToleration ignores PreferNoSchedule (a score)
_SET_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
# The taints NodeUnschedulable and the node lifecycle controller put on a node, as the filters check them.
_UNSCHEDULABLE_TAINT = {"key": TAINT_UNSCHEDULABLE, "effect": "NoSchedule"}
_NOT_READY_TAINT = {"key": TAINT_NOT_READY, "effect": "NoSchedule"}
_UNREACHABLE_TAINT = {"key": TAINT_UNREACHABLE, "effect": "NoSchedule"}


# --- What the filters read: the pod and the node ----------------------------------------------


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod spec or an expected-member description, parsed once for every node it meets (the scheduler's
    PreFilter state). ``requests`` are the effective requests, without the pod slot."""

    tolerations: tuple[Obj, ...]
    placement: Placement
    requests: Mapping[str, Decimal]

    @classmethod
    def of(cls, spec: Obj, requests: Mapping[str, Decimal] | None = None) -> PodInfo:
        """``requests`` default to the spec's own: pass them for a trimmed spec without containers."""
        return cls(tuple(spec.get("tolerations") or ()), Placement.of(spec),
                   requests_of(spec) if requests is None else requests)

    @property
    def names_nodes(self) -> bool:
        """Whether its selector or required affinity may tell apart nodes that differ only in name and hostname
        label; if not, every filter gives the same answer for all nodes of one look."""
        return self.placement.names_nodes


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What the filters read of a node: nothing else, so that equal looks mean equal answers."""

    name: str
    labels: Mapping[str, str]
    unschedulable: bool
    ready: str  # the Ready condition's status: "True", "False", or "Unknown" (also when the node never posted it)
    taints: tuple[Obj, ...]
    allocatable: Mapping[str, Decimal]  # ``pods`` included

    @classmethod
    def of(cls, node: Obj, offered: Mapping[str, Decimal] | None = None) -> NodeInfo:
        """``offered``: the node's parsed allocatable, when the caller keeps it parsed."""
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        return cls(str(meta.get("name") or ""), meta.get("labels") or {}, bool(spec.get("unschedulable")),
                   _ready_status(node), tuple(spec.get("taints") or ()),
                   allocatable(node) if offered is None else offered)

    def look(self) -> list[Any]:
        """Everything the filters read except the name and the hostname label (JSON-shaped, for a cache key)."""
        labels = {key: value for key, value in self.labels.items() if key != HOSTNAME_LABEL}
        return [labels, {"taints": list(self.taints), "unschedulable": self.unschedulable}, self.ready,
                sorted(name for name, value in self.allocatable.items() if value > 0)]


def _ready_status(node: Obj) -> str:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status") or "Unknown")
    # The node lifecycle controller treats a node that never posted status as Ready=Unknown.
    return "Unknown"


# --- The interface -------------------------------------------------------------------------------


class Filter(Protocol):
    """One Filter plugin: ``filter`` is None when ``node`` passes for ``pod``, else why it does not."""

    @property
    def name(self) -> str: ...

    def filter(self, pod: PodInfo, node: NodeInfo) -> Unfit | None: ...


@dataclass(frozen=True, slots=True)
class Unfit:
    """A node failing one filter: which, and the reason as the scheduler words it."""

    filter: Filter
    reason: str


# --- TaintToleration, NodeUnschedulable, readiness -------------------------------------------


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """core/v1 Toleration.ToleratesTaint.

    An empty effect matches every effect and an empty key every key; operator Equal (the
    default) compares values, Exists matches any value, Lt/Gt compare the taint's value with
    the toleration's as int64 (feature TaintTolerationComparisonOperators); any other
    operator, or a value that is not an integer for Lt/Gt, tolerates nothing.
    """
    effect = toleration.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Equal":
        return bool((toleration.get("value") or "") == (taint.get("value") or ""))
    if operator == "Exists":
        return True
    if operator in ("Lt", "Gt"):
        bound, actual = int64(toleration.get("value")), int64(taint.get("value"))
        if bound is None or actual is None:
            return False
        return actual < bound if operator == "Lt" else actual > bound
    return False


def _tolerated(tolerations: Iterable[Obj], taint: Obj) -> bool:
    return any(tolerates(toleration, taint) for toleration in tolerations)


def taint_text(taint: Obj) -> str:
    """A taint as kubectl prints it: key=value:Effect (key:Effect without a value)."""
    key, value, effect = taint.get("key") or "", taint.get("value") or "", taint.get("effect") or ""
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


def untolerated(tolerations: Iterable[Obj], taints: Iterable[Obj]) -> list[Obj]:
    """The taints TaintToleration filters on (NoSchedule, NoExecute) that no toleration tolerates, in order."""
    tolerations = tuple(tolerations)
    return [t for t in taints if t.get("effect") in _FILTERED_EFFECTS and not _tolerated(tolerations, t)]


class NodeUnschedulable:
    """A cordoned node is out unless the pod tolerates the unschedulable taint (NoSchedule)."""

    name = "NodeUnschedulable"

    def filter(self, pod: PodInfo, node: NodeInfo) -> Unfit | None:
        if node.unschedulable and not _tolerated(pod.tolerations, _UNSCHEDULABLE_TAINT):
            return Unfit(self, UNSCHEDULABLE)
        return None


class NodeReadiness:
    """The node lifecycle controller's readiness taints, applied before they land.

    It taints a node whose Ready condition is False with not-ready:NoSchedule and one whose Ready is Unknown with
    unreachable:NoSchedule; applying that taint here keeps a fresh NotReady node out before the taint is there.
    Only the NoSchedule effect counts: DefaultTolerationSeconds gives every pod a NoExecute toleration for both
    keys, so a NoExecute toleration alone doesn't let a pod schedule there.
    """

    name = "NodeReadiness"

    def filter(self, pod: PodInfo, node: NodeInfo) -> Unfit | None:
        if node.ready == "True":
            return None
        taint = _NOT_READY_TAINT if node.ready == "False" else _UNREACHABLE_TAINT
        return None if _tolerated(pod.tolerations, taint) else Unfit(self, NOT_READY)


class TaintToleration:
    """Every NoSchedule and NoExecute taint of the node must be tolerated; the first one that is not is named."""

    name = "TaintToleration"

    def filter(self, pod: PodInfo, node: NodeInfo) -> Unfit | None:
        for taint in node.taints:
            if taint.get("effect") in _FILTERED_EFFECTS and not _tolerated(pod.tolerations, taint):
                return Unfit(self, f"node(s) had untolerated taint {{{taint_text(taint)}}}")
        return None


# --- NodeAffinity ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Term:
    """One parsed nodeSelectorTerm; ``valid`` False means a parse error, which matches nothing."""

    labels: tuple[tuple[str, str, tuple[str, ...]], ...]
    fields: tuple[tuple[str, str, str], ...]
    valid: bool = True


def _parse_term(term: Obj) -> _Term | None:
    """None for an empty term: it selects no nodes and is skipped (nodeaffinity.isEmptyNodeSelectorTerm)."""
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return None
    labels = []
    for expr in expressions:
        requirement = label_requirement(expr)
        if requirement is None:
            return _Term((), (), valid=False)
        labels.append(requirement)
    parsed_fields = []
    for expr in fields:
        values = expr.get("values") or []
        # Node field selectors support only In/NotIn with exactly one value.
        if expr.get("operator") not in ("In", "NotIn") or len(values) != 1:
            return _Term((), (), valid=False)
        parsed_fields.append((expr.get("key") or "", expr["operator"], str(values[0])))
    return _Term(tuple(labels), tuple(parsed_fields))


_OPERATOR_TEXT = {"In": "in", "NotIn": "notin"}


def requirement_text(requirement: tuple[str, str, tuple[str, ...] | str]) -> str:
    """A node selector requirement (a label one, or a field one with its single value) in label selector syntax,
    as kubectl's ``-l`` reads it: ``zone in (a,b)``, ``!pool``, ``generation<6``."""
    key, operator, values = requirement
    listed = ",".join((values,) if isinstance(values, str) else values)
    if operator in _OPERATOR_TEXT:
        return f"{key} {_OPERATOR_TEXT[operator]} ({listed})"
    if operator == "Exists":
        return key
    if operator == "DoesNotExist":
        return f"!{key}"
    return f"{key}{'>' if operator == 'Gt' else '<'}{listed}"


def _term_matches(term: _Term, labels: Mapping[str, str], name: str) -> bool:
    if not term.valid:
        return False
    if not all(label_matches(labels, *requirement) for requirement in term.labels):
        return False
    if name:  # the only node field is metadata.name; without a name, field terms are not checked
        node_fields = {"metadata.name": name}
        for key, operator, value in term.fields:
            if (node_fields.get(key, "") == value) != (operator == "In"):
                return False
    return True


@dataclass(frozen=True, slots=True)
class Placement:
    """A pod's nodeSelector and required node affinity, parsed once for many nodes."""

    selector: tuple[tuple[str, str], ...]
    terms: tuple[_Term, ...] | None  # None: no required node affinity

    @classmethod
    def of(cls, pod_spec: Obj) -> Placement:
        selector = tuple((str(k), str(v)) for k, v in (pod_spec.get("nodeSelector") or {}).items())
        node_affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
        required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if required is None:
            return cls(selector, None)
        parsed = (_parse_term(term) for term in required.get("nodeSelectorTerms") or [])
        return cls(selector, tuple(term for term in parsed if term is not None))

    @property
    def names_nodes(self) -> bool:
        """Whether it reads a node's name or hostname label: only then can two nodes of one look differ."""
        return any(key == HOSTNAME_LABEL for key, _ in self.selector) or any(
            term.fields or any(requirement[0] == HOSTNAME_LABEL for requirement in term.labels)
            for term in self.terms or ())

    @staticmethod
    def requirement_matches(requirement: tuple[str, str, tuple[str, ...]], labels: Mapping[str, str]) -> bool:
        """One label requirement of a term against a node's labels."""
        return label_matches(labels, *requirement)

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        if any(labels.get(key) != value for key, value in self.selector):
            return False
        # Terms are ORed; no (non-empty) term means no node matches.
        return self.terms is None or any(_term_matches(term, labels, name) for term in self.terms)


class NodeAffinity:
    """nodeSelector (every label equal) AND required node affinity (terms ORed, requirements ANDed)."""

    name = "NodeAffinity"

    def filter(self, pod: PodInfo, node: NodeInfo) -> Unfit | None:
        return None if pod.placement.matches(node.labels, node.name) else Unfit(self, AFFINITY_MISMATCH)


# --- NodeResourcesFit: resources the node doesn't offer at all --------------------------------


class NodeResourcesFit:
    """A requested resource the node's allocatable lacks (or has zero of): NodeResourcesFit counts it as zero.

    No amount of waiting or preemption frees a resource a node doesn't offer, so such a node is out for the member
    regardless of load. How much of what it offers is free is the planner's to check.
    """

    name = "NodeResourcesFit"

    def filter(self, pod: PodInfo, node: NodeInfo) -> Unfit | None:
        offered = node.allocatable
        if all(value <= 0 or offered.get(name, 0) > 0 for name, value in pod.requests.items()):
            return None
        missing = sorted(name for name, value in pod.requests.items() if value > 0 and offered.get(name, 0) <= 0)
        return Unfit(self, f"node(s) lack resource {', '.join(missing)}")


# --- Every filter, in the scheduler's order -------------------------------------------------------

FILTERS: tuple[Filter, ...] = (NodeUnschedulable(), NodeReadiness(), TaintToleration(), NodeAffinity(),
                               NodeResourcesFit())


def unfit(pod: PodInfo, node: NodeInfo) -> Unfit | None:
    """The first filter the node fails for the pod, or None when it passes them all."""
    for check in FILTERS:
        found = check.filter(pod, node)
        if found is not None:
            return found
    return None


def feasible(pod: PodInfo, nodes: Iterable[NodeInfo]) -> list[str]:
    """Names of the nodes (in input order) that pass every filter for the pod."""
    return [node.name for node in nodes if unfit(pod, node) is None]


# --- NodePorts: what the planner checks host ports with ------------------------------------------


def host_ports(pod_spec: Obj) -> frozenset[HostPort]:
    """(hostIP, hostPort, protocol) the pod takes on its node, defaults applied.

    NodePorts counts the app containers and, since kubernetes#132040, restartable init
    containers (sidecars); an empty hostIP means 0.0.0.0 and an empty protocol TCP. With
    hostNetwork the API defaults every hostPort to its containerPort. An expected-member
    description has no containers, hence no ports.
    """
    host_network = bool(pod_spec.get("hostNetwork"))
    containers = list(pod_spec.get("containers") or [])
    containers += [c for c in pod_spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    ports = set()
    for container in containers:
        for port in container.get("ports") or []:
            number = int(port.get("hostPort") or 0)
            if not number and host_network:
                number = int(port.get("containerPort") or 0)
            if number > 0:
                ports.add((port.get("hostIP") or ANY_HOST_IP, number, port.get("protocol") or "TCP"))
    return frozenset(ports)


def normalize_port(port: HostPort) -> HostPort:
    """kube-scheduler's defaults: an empty hostIP binds every address, an empty protocol is TCP."""
    ip, number, protocol = port
    return (ANY_HOST_IP if ip in ("", ANY_HOST_IP) else ip, int(number), protocol or "TCP")


def ports_clash(a: HostPort, b: HostPort) -> bool:
    """HostPortInfo.CheckConflict: same port and protocol, and the same hostIP or 0.0.0.0 on either side."""
    return a[1] == b[1] and a[2] == b[2] and (a[0] == b[0] or a[0] == ANY_HOST_IP or b[0] == ANY_HOST_IP)


def host_port_conflict(wanted: Iterable[HostPort], used: Iterable[HostPort]) -> HostPort | None:
    """The first wanted port (sorted) that collides with one in use on the node, else None."""
    used = tuple(used)
    return next((port for port in sorted(wanted) if any(ports_clash(port, other) for other in used)), None)


# --- What the controller cannot evaluate exactly -------------------------------------------------


def _selects_exactly(selector: Obj, match_label_keys: Iterable[str], labels: Mapping[str, str], key: str) -> bool:
    """True when the label selector (with matchLabelKeys merged) selects exactly ``key == labels[key]``."""
    value = labels.get(key)
    if not value:
        return False
    requirements: list[tuple[str, str, tuple[str, ...]]] = [
        (k, "In", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()
    ]
    for expr in selector.get("matchExpressions") or []:
        requirements.append((expr.get("key") or "", expr.get("operator") or "", tuple(expr.get("values") or ())))
    # matchLabelKeys adds "k in (the pod's own value of k)" for each listed key the pod has.
    requirements += [(k, "In", (labels[k],)) for k in match_label_keys if k in labels]
    if any(k != key or op not in _SET_OPERATORS or not label_matches({key: value}, k, op, vals)
           for k, op, vals in requirements):
        return False
    return any(op == "In" and set(vals) == {value} for _, op, vals in requirements)


def _one_member_per_node(term: Obj, labels: Mapping[str, str] | None) -> bool:
    """A required anti-affinity term that only keeps two members of this gang off one node.

    The planner can honour that exactly (one member per node). Anything wider (other labels,
    other namespaces: an empty namespaceSelector means all of them, other topology keys) needs
    the whole cluster's pods and labels, which a plan doesn't look at.
    """
    return (
        labels is not None
        and term.get("topologyKey") == HOSTNAME_LABEL
        and not term.get("namespaces")
        and term.get("namespaceSelector") is None
        and not term.get("mismatchLabelKeys")
        and _selects_exactly(term.get("labelSelector") or {}, term.get("matchLabelKeys") or (), labels,
                             keys.POD_GROUP_LABEL)
    )


def one_member_per_node(pod_spec: Obj, labels: Mapping[str, str] | None) -> bool:
    """The pod has a required anti-affinity term that keeps it off nodes with another member of its gang."""
    anti = ((pod_spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or []
    return any(_one_member_per_node(term, labels) for term in anti)


# The planner keeps such members apart with its host-port machinery, through a pseudo port per gang: a member with
# the term takes it on every address (its term selects every member, and the scheduler also checks the terms of the
# pods already on a node), any other member on an address of its own (it clashes with members with the term only).
GANG_MEMBER_PROTOCOL = "gang-member/"


def gang_member_port(namespace: str, group: str, member: str | None) -> HostPort:
    """The pseudo port of a member of gang ``namespace/group``: ``member`` None for a member with the term."""
    return (ANY_HOST_IP if member is None else f"member {member}", 1, f"{GANG_MEMBER_PROTOCOL}{namespace}/{group}")


def is_gang_member_port(port: HostPort) -> bool:
    return str(port[2]).startswith(GANG_MEMBER_PROTOCOL)


def _claims(pod_spec: Obj, pod_name: str | None) -> list[tuple[str, str | None]]:
    """(display name, claim name to look up) for each volume backed by a PersistentVolumeClaim."""
    claims: list[tuple[str, str | None]] = []
    for volume in pod_spec.get("volumes") or []:
        if volume.get("persistentVolumeClaim"):
            name = str(volume["persistentVolumeClaim"].get("claimName") or "")
            claims.append((name, name))
        elif volume.get("ephemeral"):
            # A generic ephemeral volume's claim is named <pod name>-<volume name>.
            ephemeral = f"{pod_name}-{volume.get('name')}" if pod_name else None
            claims.append((ephemeral or f"{volume.get('name')} (ephemeral)", ephemeral))
    return claims


def certifiability(
    pod_spec: Obj,
    *,
    labels: Mapping[str, str] | None = None,
    bound_claims: Callable[[str], bool] | None = None,
    pod_name: str | None = None,
) -> str | None:
    """A reason when the pod has a Filter-time constraint the planner can't evaluate, else None.

    Such a gang is *not certifiable*: a plan could be wrong, so it is held (unless the root opts
    into best effort). Only hard constraints count; preferred affinities and ScheduleAnyway
    spread constraints are scores and never make a node infeasible.

    ``labels`` are the pod's labels (for an expected member, the gang label it will get); the
    one-member-per-node anti-affinity is recognised only on the gang label with their value.
    ``bound_claims(claim_name)`` says whether a claim in the pod's namespace is bound; without it
    every claim counts as unbound, since WaitForFirstConsumer binding depends on the StorageClass.
    ``pod_name`` names generic ephemeral volumes' claims.
    """
    reasons = []
    affinity = pod_spec.get("affinity") or {}
    if ((affinity.get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")):
        reasons.append("required pod affinity")
    anti = (affinity.get("podAntiAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []
    if not all(_one_member_per_node(term, labels) for term in anti):
        reasons.append("required pod anti-affinity other than one gang member per node")
    if any(c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
           for c in pod_spec.get("topologySpreadConstraints") or []):
        reasons.append("topology spread constraints")
    if pod_spec.get("resourceClaims"):
        reasons.append("dynamic resource claims")
    unbound = [shown for shown, name in _claims(pod_spec, pod_name)
               if name is None or bound_claims is None or not bound_claims(name)]
    if unbound:
        reasons.append(f"unbound volume claims ({', '.join(unbound)})")
    return "; ".join(reasons) or None
