"""Node capacity accounting for the gate controller, counted the way kube-scheduler counts it.

A node's free capacity for a gang is what NodeResourcesFit would see when the gang's members
are scheduled: allocatable, minus the requests of the pods in the scheduler's cache for that
node (every bound pod that is not terminal), minus what this controller reserved for members
it released that are not bound yet, minus the nominated pods the scheduler adds before
filtering (those with priority at least the incoming pod's). The pod count is a resource: each
counted pod takes one ``pods`` slot. All functions are pure and never mutate their arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gang.quantity import parse_quantity
from gang.resources import Resources, pod_requests

__all__ = [
    "PODS",
    "TERMINAL_PHASES",
    "NodeUsage",
    "Resources",
    "add",
    "allocatable",
    "fits",
    "free_capacity",
    "is_terminal",
    "node_usage",
    "pod_usage",
    "requests_of",
    "shortfall",
    "subtract",
    "with_pod_slot",
]

PODS = "pods"
# The scheduler's pod informer lists only pods with status.phase not in these; a pod that is
# merely terminating (deletionTimestamp set, still Running) stays in its cache and keeps its
# resources until it is gone.
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_ZERO = Decimal(0)


def add(a: Mapping[str, Decimal], b: Mapping[str, Decimal]) -> Resources:
    """a + b per resource; a resource missing on one side counts as zero."""
    total = dict(a)
    for name, value in b.items():
        total[name] = total.get(name, _ZERO) + value
    return total


def subtract(a: Mapping[str, Decimal], b: Mapping[str, Decimal]) -> Resources:
    """a − b per resource. Negative results are kept: an overcommitted node (static pods) stays short."""
    total = dict(a)
    for name, value in b.items():
        total[name] = total.get(name, _ZERO) - value
    return total


def shortfall(requests: Mapping[str, Decimal], free: Mapping[str, Decimal]) -> Resources:
    """How much of each requested resource is missing from ``free``; empty when the requests fit.

    NodeResourcesFit checks only resources the pod requests with a value above zero, against
    allocatable − requested (a missing resource is zero), so a zero request fits even a node
    that is over-committed on that resource.
    """
    return {
        name: value - free.get(name, _ZERO)
        for name, value in sorted(requests.items())
        if value > 0 and value > free.get(name, _ZERO)
    }


def fits(requests: Mapping[str, Decimal], free: Mapping[str, Decimal]) -> bool:
    """True when every positive request is within ``free`` (include the ``pods`` slot in requests)."""
    return all(value <= 0 or value <= free.get(name, _ZERO) for name, value in requests.items())


def with_pod_slot(requests: Mapping[str, Decimal]) -> Resources:
    """The requests plus the one ``pods`` slot every pod takes (idempotent: pods can't be requested)."""
    return {**requests, PODS: Decimal(1)}


def requests_of(spec: Mapping[str, Any]) -> Resources:
    """Effective requests of a pod spec, or of an expected-member description.

    An expected member (``scheduling.kubenexus.io/expected-members``) already carries its
    effective requests as a ``requests`` map of quantities; a pod spec never has that key,
    so its requests are computed with ``pod_requests`` exactly as kube-scheduler does.
    """
    if "requests" in spec:
        parsed = {name: parse_quantity(value) for name, value in (spec.get("requests") or {}).items()}
        return {name: value for name, value in parsed.items() if value}
    return pod_requests(spec)


def pod_usage(pod: Mapping[str, Any]) -> Resources:
    """What one pod object takes on its node: its effective requests and a pod slot."""
    return with_pod_slot(pod_requests(pod.get("spec") or {}))


def is_terminal(pod: Mapping[str, Any]) -> bool:
    """Succeeded or Failed: gone from the scheduler's cache. Terminating pods are not terminal."""
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def allocatable(node: Mapping[str, Any]) -> Resources:
    """``status.allocatable`` of a node, ``pods`` included; the scheduler ignores ``capacity``."""
    raw = (node.get("status") or {}).get("allocatable") or {}
    return {name: parse_quantity(value) for name, value in raw.items()}


@dataclass(frozen=True)
class NodeUsage:
    """The four terms of a node's free capacity, kept apart so that events can update one term.

    ``used`` and ``reserved`` include their pods' slots; each entry of ``nominated`` is
    (priority, requests with the pod slot) of one pod whose ``status.nominatedNodeName`` is
    this node and which is not bound yet.
    """

    allocatable: Resources
    used: Resources
    reserved: Resources
    nominated: tuple[tuple[int, Resources], ...] = ()

    def free(self, gang_priority: int) -> Resources:
        """Free capacity for a pod of ``gang_priority``.

        kube-scheduler's addGENominatedPods adds nominated pods of priority >= the incoming
        pod's before running Filter; lower-priority nominations are ignored (it may preempt them).
        """
        free = subtract(subtract(self.allocatable, self.used), self.reserved)
        for priority, requests in self.nominated:
            if priority >= gang_priority:
                free = subtract(free, requests)
        return free


def node_usage(
    node: Mapping[str, Any],
    pods_on_node: Iterable[Mapping[str, Any]],
    reserved: Mapping[str, Decimal] | None = None,
    nominated: Iterable[tuple[int, Mapping[str, Decimal]]] = (),
) -> NodeUsage:
    """Collect a node's usage from the pods bound to it (the caller selects them by spec.nodeName).

    ``reserved`` is taken as given and must include the ``pods`` slots of the reserved members
    (build it from ``with_pod_slot``); each ``nominated`` entry is (priority, requests) of one pod
    and gets its slot here. Terminal pods count nothing; terminating pods count in full.
    """
    used: Resources = {}
    for pod in pods_on_node:
        if not is_terminal(pod):
            used = add(used, pod_usage(pod))
    return NodeUsage(
        allocatable=allocatable(node),
        used=used,
        reserved=dict(reserved or {}),
        nominated=tuple((priority, with_pod_slot(requests)) for priority, requests in nominated),
    )


def free_capacity(
    node: Mapping[str, Any],
    pods_on_node: Iterable[Mapping[str, Any]],
    reserved: Mapping[str, Decimal] | None,
    nominated: Iterable[tuple[int, Mapping[str, Decimal]]],
    gang_priority: int,
) -> Resources:
    """allocatable − non-terminal bound pods − reserved − nominated pods of priority >= the gang's."""
    return node_usage(node, pods_on_node, reserved, nominated).free(gang_priority)
