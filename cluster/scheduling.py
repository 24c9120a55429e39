"""kube-scheduler's default Filter plugins and LeastAllocated scoring, over plain Kubernetes JSON dicts.

The emulator must place pods exactly where a real cluster would, so that a gang release which only
works by a lucky placement fails here too. Everything below is re-derived from kube-scheduler's source
(NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit, FitError), with
requests counted by ``cluster.pod_requests``; it deliberately shares no code with the product, which is what it
is meant to check.

Quantities are compared as kube-scheduler compares them: cpu in whole millicores, everything else in
whole units, each rounded up (``Quantity.MilliValue()`` / ``Quantity.Value()``).

Nominated pods (``status.nominatedNodeName``, set by preemption) hold their node's room against pods of lower or
equal priority, and their own nominated node is tried first. Preemption itself is ``cluster.preemption``.

Not modelled: volumes, pod (anti-)affinity, topology spread, preferred affinity, PreferNoSchedule
scoring, BalancedAllocation/ImageLocality scores, scheduling gates (a PreEnqueue concern:
callers must not offer gated pods), and random tie-breaking (ties go to the first node name instead).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from cluster.pod_requests import pod_requests
from cluster.quantity import parse_quantity

Obj = Mapping[str, Any]

MAX_NODE_SCORE = 100
# pkg/scheduler/util: requests assumed, for scoring only, for a container that omits cpu or memory.
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
# Default NodeResourcesFit scoring strategy: LeastAllocated over cpu and memory, weight 1 each.
LEAST_ALLOCATED_WEIGHTS: tuple[tuple[str, int], ...] = (("cpu", 1), ("memory", 1))

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_NAME = "node(s) didn't match the requested node name"
REASON_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_NODE_PORTS = "node(s) didn't have free ports for the requested pod ports"
REASON_TOO_MANY_PODS = "Too many pods"
# Nodes left out by NodeAffinity's PreFilter (required matchFields metadata.name In ...).
REASON_AFFINITY_PREFILTER = "node(s) didn't satisfy plugin(s) [NodeAffinity]"
NO_NODES_MESSAGE = "no nodes available to schedule pods"
# A node may fail several resources at once; like Status.Message() the reasons are joined with this.
REASON_SEPARATOR = ", "

TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
_FILTERED_TAINT_EFFECTS = ("NoSchedule", "NoExecute")
_TERMINAL_PHASES = ("Succeeded", "Failed")
_BIND_ALL_IP = "0.0.0.0"
_INT64 = re.compile(r"^[+-]?[0-9]+$")


# --- quantities -------------------------------------------------------------------------------------


def _units(resource: str, value: Decimal) -> int:
    """The int64 kube-scheduler keeps: millicores for cpu, whole units otherwise, rounded up."""
    return math.ceil(value * 1000) if resource == "cpu" else math.ceil(value)


def _is_scalar(resource: str) -> bool:
    """Extended, prefixed-native, hugepages and attachable-volume resources; plain unknown names are ignored."""
    if resource.startswith(("hugepages-", "attachable-volumes-")):
        return True
    return "/" in resource and not resource.startswith("requests.")


def _spec(pod: Obj) -> Obj:
    return pod.get("spec") or {}


def _request_units(pod: Obj) -> dict[str, int]:
    units = ((name, _units(name, value)) for name, value in pod_requests(_spec(pod)).items())
    return {name: amount for name, amount in units if amount}


# NonMissingContainerRequests: what the scorer assumes for a container that requests no cpu or memory at all.
_NON_MISSING = {"cpu": Decimal(DEFAULT_MILLI_CPU_REQUEST) / 1000, "memory": Decimal(DEFAULT_MEMORY_REQUEST)}


def non_zero_requests(pod: Obj) -> tuple[int, int]:
    """(millicpu, memory bytes) the scorer uses: 100m/200Mi filled in per container (NonMissingContainerRequests)."""
    requests = pod_requests(_spec(pod), _NON_MISSING)
    return _units("cpu", requests.get("cpu", Decimal(0))), _units("memory", requests.get("memory", Decimal(0)))


def _allocatable(node: Obj) -> dict[str, int]:
    raw = (node.get("status") or {}).get("allocatable") or {}
    return {name: _units(name, parse_quantity(value).value) for name, value in raw.items()}


# --- node usage (kube-scheduler's NodeInfo) ---------------------------------------------------------


@dataclass(frozen=True)
class NodeUsage:
    """What NodeInfo aggregates from the pods bound to a node: Requested, NonZeroRequested and the pod count."""

    requested: Mapping[str, int] = field(default_factory=dict)
    non_zero_cpu: int = 0
    non_zero_memory: int = 0
    pod_count: int = 0


def node_usage(pods_on_node: Iterable[Obj]) -> NodeUsage:
    """Sum the pods already on one node (callers pass bound, non-terminal pods; see ``pods_by_node``)."""
    requested: Counter[str] = Counter()
    cpu = memory = count = 0
    for pod in pods_on_node:
        requested.update(_request_units(pod))
        pod_cpu, pod_memory = non_zero_requests(pod)
        cpu, memory, count = cpu + pod_cpu, memory + pod_memory, count + 1
    return NodeUsage(dict(requested), cpu, memory, count)


def occupies_node(pod: Obj) -> bool:
    """Bound and not terminal: the scheduler cache ignores Succeeded/Failed pods but keeps terminating ones."""
    return bool(_spec(pod).get("nodeName")) and (pod.get("status") or {}).get("phase") not in _TERMINAL_PHASES


def pods_by_node(pods: Iterable[Obj]) -> dict[str, list[Obj]]:
    """Pods that occupy each node, keyed by spec.nodeName."""
    grouped: dict[str, list[Obj]] = defaultdict(list)
    for pod in pods:
        if occupies_node(pod):
            grouped[_spec(pod)["nodeName"]].append(pod)
    return dict(grouped)


# --- NodeResourcesFit filter ------------------------------------------------------------------------


@dataclass(frozen=True)
class Insufficient:
    """noderesources.InsufficientResource: what the pod asks for, what the node's pods use, what it has."""

    resource: str
    requested: int
    used: int
    capacity: int

    @property
    def reason(self) -> str:
        return REASON_TOO_MANY_PODS if self.resource == "pods" else f"Insufficient {self.resource}"


def insufficient_resources(pod: Obj, node: Obj, used: NodeUsage) -> list[Insufficient]:
    """noderesources.Fits: the pod count, then cpu, memory, ephemeral-storage, then scalar resources by name
    (kube-scheduler's NodeResourcesFit filter and the kubelet's admission both call it)."""
    allocatable = _allocatable(node)
    found = []
    if used.pod_count + 1 > allocatable.get("pods", 0):
        found.append(Insufficient("pods", 1, used.pod_count, allocatable.get("pods", 0)))
    wanted = _request_units(pod)
    scalars = sorted(name for name in wanted if _is_scalar(name))
    for name in ("cpu", "memory", "ephemeral-storage", *scalars):
        amount, taken, capacity = wanted.get(name, 0), used.requested.get(name, 0), allocatable.get(name, 0)
        if amount > 0 and amount > capacity - taken:
            found.append(Insufficient(name, amount, taken, capacity))
    return found


def fits_resources(pod: Obj, node: Obj, used: NodeUsage) -> str | None:
    """NodeResourcesFit: every insufficient resource, joined as the Filter status joins them."""
    return REASON_SEPARATOR.join(i.reason for i in insufficient_resources(pod, node, used)) or None


# --- TaintToleration and NodeUnschedulable ----------------------------------------------------------


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """Toleration.ToleratesTaint: empty effect/key match any; operator "" means Equal; Gt/Lt are alpha (off)."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def _tolerated(pod: Obj, taint: Obj) -> bool:
    return any(tolerates(t, taint) for t in _spec(pod).get("tolerations") or [])


def untolerated_taint(pod: Obj, node: Obj, effects: tuple[str, ...] = _FILTERED_TAINT_EFFECTS) -> Obj | None:
    """FindMatchingUntoleratedTaint: the first taint with one of ``effects`` that no toleration of the pod matches."""
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in effects and not _tolerated(pod, taint):
            return taint
    return None


def tolerates_taints(pod: Obj, node: Obj) -> str | None:
    """TaintToleration: the first NoSchedule/NoExecute taint no toleration matches; PreferNoSchedule only scores."""
    taint = untolerated_taint(pod, node)
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"
    return None


def node_schedulable(pod: Obj, node: Obj) -> str | None:
    """NodeUnschedulable: a cordoned node admits only pods tolerating the unschedulable:NoSchedule taint."""
    if not (node.get("spec") or {}).get("unschedulable"):
        return None
    if _tolerated(pod, {"key": TAINT_UNSCHEDULABLE, "effect": "NoSchedule"}):
        return None
    return REASON_UNSCHEDULABLE


# --- NodeName ---------------------------------------------------------------------------------------


def _node_name(node: Obj) -> str:
    return (node.get("metadata") or {}).get("name", "")


def node_name_matches(pod: Obj, node: Obj) -> str | None:
    """NodeName: a pod naming a node fits only that node."""
    wanted = _spec(pod).get("nodeName")
    return None if not wanted or wanted == _node_name(node) else REASON_NODE_NAME


# --- NodeAffinity -----------------------------------------------------------------------------------


def _int64(text: str | None) -> int | None:
    """strconv.ParseInt(s, 10, 64), or None where Go would fail."""
    if text is None or not _INT64.match(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def _label_requirement(expr: Obj, labels: Mapping[str, str]) -> bool:
    """One matchExpression; a malformed one (labels.NewRequirement error) fails its whole term."""
    key, operator, values = expr.get("key", ""), expr.get("operator"), list(expr.get("values") or [])
    if operator in ("In", "NotIn"):
        if not values:
            return False
        return (labels.get(key) in values) if operator == "In" else (key not in labels or labels[key] not in values)
    if operator in ("Exists", "DoesNotExist"):
        return not values and ((key in labels) == (operator == "Exists"))
    if operator in ("Gt", "Lt"):
        bound = _int64(values[0]) if len(values) == 1 else None
        actual = _int64(labels.get(key))
        if bound is None or actual is None:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return False


def _field_requirement(expr: Obj, node_name: str) -> bool:
    """One matchField: In/NotIn with exactly one value; metadata.name is the only field a node has."""
    values, operator = list(expr.get("values") or []), expr.get("operator")
    if len(values) != 1 or operator not in ("In", "NotIn"):
        return False
    actual = node_name if expr.get("key") == "metadata.name" else ""
    return (actual == values[0]) == (operator == "In")


def _term_matches(term: Obj, node: Obj) -> bool:
    """Expressions and fields ANDed; an empty term selects nothing."""
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return False
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(_label_requirement(e, labels) for e in expressions) and all(
        _field_requirement(f, _node_name(node)) for f in fields
    )


def _required_affinity(pod: Obj) -> Obj | None:
    affinity = (_spec(pod).get("affinity") or {}).get("nodeAffinity") or {}
    return affinity.get("requiredDuringSchedulingIgnoredDuringExecution")


def matches_node_selector_and_affinity(pod: Obj, node: Obj) -> str | None:
    """NodeAffinity filter: every spec.nodeSelector label equal, and at least one required term (ORed) matching."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    selector = _spec(pod).get("nodeSelector") or {}
    if any(key not in labels or labels[key] != value for key, value in selector.items()):
        return REASON_NODE_AFFINITY
    required = _required_affinity(pod)
    if required is not None and not any(_term_matches(t, node) for t in required.get("nodeSelectorTerms") or []):
        return REASON_NODE_AFFINITY
    return None


def affinity_node_names(pod: Obj) -> set[str] | None:
    """NodeAffinity PreFilter: when every required term pins metadata.name In, only those nodes are filtered."""
    required = _required_affinity(pod)
    terms = (required or {}).get("nodeSelectorTerms") or []
    if not terms:
        return None
    names: set[str] = set()
    for term in terms:
        pinned = [
            set(f.get("values") or [])
            for f in term.get("matchFields") or []
            if f.get("key") == "metadata.name" and f.get("operator") == "In"
        ]
        if not pinned:
            return None  # an unpinned term may match any node; terms are ORed
        names |= set.intersection(*pinned)
    # An empty set (terms pinning disjoint names) is kube-scheduler's "pod affinity terms conflict";
    # here every node then fails the affinity filter instead.
    return names or None


# --- NodePorts --------------------------------------------------------------------------------------


def _host_ports(pod: Obj) -> list[tuple[str, str, int]]:
    """(hostIP, protocol, hostPort) of app containers and sidecars (restartPolicy Always init containers)."""
    spec = _spec(pod)
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    ports = []
    for container in [*sidecars, *(spec.get("containers") or [])]:
        for port in container.get("ports") or []:
            if int(port.get("hostPort") or 0) > 0:
                ports.append((port.get("hostIP") or _BIND_ALL_IP, port.get("protocol") or "TCP", int(port["hostPort"])))
    return ports


def _port_conflicts(wanted: tuple[str, str, int], used: set[tuple[str, str, int]]) -> bool:
    """HostPortInfo.CheckConflict: same protocol and port, and either side binds 0.0.0.0 or both the same IP."""
    ip, protocol, port = wanted
    if ip == _BIND_ALL_IP:
        return any((p, n) == (protocol, port) for _, p, n in used)
    return (_BIND_ALL_IP, protocol, port) in used or (ip, protocol, port) in used


def host_ports_free(pod: Obj, node: Obj, pods_on_node: Iterable[Obj]) -> str | None:
    """NodePorts: no requested host port may collide with one a pod on the node already holds."""
    used = {port for other in pods_on_node for port in _host_ports(other)}
    if any(_port_conflicts(port, used) for port in _host_ports(pod)):
        return REASON_NODE_PORTS
    return None


# --- filtering, scoring, selection ------------------------------------------------------------------


def filter_node(pod: Obj, node: Obj, pods_on_node: Sequence[Obj], used: NodeUsage | None = None) -> str | None:
    """Run the filters in the default profile's order and stop at the first failure, as RunFilterPlugins does."""
    used = node_usage(pods_on_node) if used is None else used
    return (
        node_schedulable(pod, node)
        or node_name_matches(pod, node)
        or tolerates_taints(pod, node)
        or matches_node_selector_and_affinity(pod, node)
        or host_ports_free(pod, node, pods_on_node)
        or fits_resources(pod, node, used)
    )


def _least_requested(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def least_allocated_score(pod: Obj, node: Obj, used: NodeUsage) -> int:
    """Σ w·(allocatable − requested)·100/allocatable / Σw over cpu and memory, integer maths, this pod included."""
    pod_cpu, pod_memory = non_zero_requests(pod)
    requested = {"cpu": used.non_zero_cpu + pod_cpu, "memory": used.non_zero_memory + pod_memory}
    allocatable = _allocatable(node)
    score = weights = 0
    for resource, weight in LEAST_ALLOCATED_WEIGHTS:
        capacity = allocatable.get(resource, 0)
        if capacity == 0:
            continue  # a resource the node lacks is left out of both sums
        score += _least_requested(requested[resource], capacity) * weight
        weights += weight
    return score // weights if weights else 0


def priority(pod: Obj) -> int:
    """``corev1helpers.PodPriority``: spec.priority, 0 when unset."""
    return int(_spec(pod).get("priority") or 0)


def nominated_node(pod: Obj) -> str:
    return (pod.get("status") or {}).get("nominatedNodeName") or ""


def nominated_pods_for(pod: Obj, nominated: Iterable[Obj]) -> dict[str, list[Obj]]:
    """``addGENominatedPods``: per node, the pods nominated to it (other than ``pod``) whose priority is at least
    ``pod``'s; ``pod`` must not take the room preemption freed for them."""
    uid = (pod.get("metadata") or {}).get("uid")
    grouped: dict[str, list[Obj]] = defaultdict(list)
    for other in nominated:
        if nominated_node(other) and (other.get("metadata") or {}).get("uid") != uid and priority(other) >= priority(
                pod):
            grouped[nominated_node(other)].append(other)
    return dict(grouped)


def resolvable(reason: str) -> bool:
    """Whether removing pods could clear the filter failure ``reason``: NodePorts and NodeResourcesFit return
    Unschedulable; NodeUnschedulable, NodeName, TaintToleration and NodeAffinity UnschedulableAndUnresolvable, which
    preemption leaves alone (``nodesWherePreemptionMightHelp``)."""
    return reason == REASON_NODE_PORTS or all(
        part == REASON_TOO_MANY_PODS or part.startswith("Insufficient ") for part in reason.split(REASON_SEPARATOR))


def schedule(pod: Obj, nodes: Sequence[Obj], pods: Iterable[Obj],
             nominated: Iterable[Obj] = ()) -> tuple[str | None, dict[str, str]]:
    """Pick the node kube-scheduler would; when none fits, return each node's reason for the FailedScheduling event.

    ``pods`` is every pod in the cluster; only bound, non-terminal ones use capacity. ``nominated`` are the pending
    pods the scheduler has nominated to nodes: those of at least ``pod``'s priority count on their node for the
    filters (``RunFilterPluginsWithNominatedPods``), not for scoring. A pod nominated to a node that passes the
    filters goes there (``evaluateNominatedNode``). Equal scores go to the first node name (kube-scheduler picks one
    at random, which a test cannot rely on either).
    """
    bound = pods_by_node(pods)
    ahead = nominated_pods_for(pod, nominated)
    allowed = affinity_node_names(pod)
    reasons: dict[str, str] = {}
    scored: list[tuple[int, str]] = []
    for node in sorted(nodes, key=lambda n: _node_name(n) != nominated_node(pod)):  # the nominated node first
        name = _node_name(node)
        if allowed is not None and name not in allowed:
            reasons[name] = REASON_AFFINITY_PREFILTER
            continue
        on_node = bound.get(name, [])
        used = node_usage(on_node)
        reason = filter_node(pod, node, on_node + ahead[name], None) if name in ahead else \
            filter_node(pod, node, on_node, used)
        if reason:
            reasons[name] = reason
        elif name == nominated_node(pod):
            return name, {}
        else:
            scored.append((-least_allocated_score(pod, node, used), name))
    if not scored:
        return None, reasons
    return min(scored)[1], {}


def unschedulable_message(reasons: Mapping[str, str], total_nodes: int, post_filter: str = "") -> str:
    """FitError.Error(): "0/N nodes are available: <count reason>, ...." sorted as whole strings, like sort.Strings,
    then what the PostFilter plugins (preemption) said, if anything, as " <message>.".

    The count leads each entry, so "1 node(s) were unschedulable" sorts before "2 Insufficient cpu".
    """
    if total_nodes == 0:
        return NO_NODES_MESSAGE
    counts = Counter(reason for joined in reasons.values() for reason in joined.split(REASON_SEPARATOR))
    histogram = sorted(f"{count} {reason}" for reason, count in counts.items())
    message = f"0/{total_nodes} nodes are available:"
    message = f"{message} {', '.join(histogram)}." if histogram else message
    return f"{message} {post_filter}." if post_filter else message
