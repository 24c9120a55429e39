"""A pod's resource requests as kube-scheduler counts them, over plain pod JSON.

Ported from kubernetes/kubernetes (read the source, not memory):
  staging/src/k8s.io/component-helpers/resource/helpers.go   PodRequests, AggregateContainerRequests,
                                                             IsSupportedPodLevelResource, applyNonMissing
  pkg/apis/core/v1/defaults.go                               SetDefaults_Pod (requests from limits),
                                                             defaultPodRequests (pod-level requests)
  KEP-753 (sidecar containers): "Resources calculation for scheduling and pod admission"
  KEP-2837 (pod-level resources): "Proposed Validation & Defaulting Rules"

The emulator's own arithmetic, deliberately not the product's: the scheduler and the kubelet count with it,
and a test compares both over random pod shapes, so a counting bug in either shows up as a disagreement.

The apiserver defaults requests before a pod is stored; callers may also pass pods built by hand (tests), so
the defaulting is applied here as well (it is idempotent on a stored pod).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from cluster.quantity import parse_quantity

ResourceList = dict[str, Decimal]

#: Resources a pod may set in spec.resources (IsSupportedPodLevelResource); others there are ignored.
POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})
_SIDECAR = "Always"  # an init container with restartPolicy Always is a restartable init container (sidecar)


def _parsed(resources: Mapping[str, Any] | None) -> ResourceList:
    return {name: parse_quantity(raw).value for name, raw in (resources or {}).items()}


def _add(total: ResourceList, extra: Mapping[str, Decimal]) -> None:
    """addResourceList: a name missing from ``total`` is added."""
    for name, value in extra.items():
        total[name] = total.get(name, Decimal(0)) + value


def _raise_to(total: ResourceList, other: Mapping[str, Decimal]) -> None:
    """maxResourceList: every name of ``other`` raised to at least its value there."""
    for name, value in other.items():
        if name not in total or value > total[name]:
            total[name] = value


def container_requests(container: Mapping[str, Any]) -> ResourceList:
    """Its requests after SetDefaults_Pod: a resource with a limit and no request requests its limit."""
    resources = container.get("resources") or {}
    return _parsed({**(resources.get("limits") or {}), **(resources.get("requests") or {})})


def aggregate_container_requests(spec: Mapping[str, Any], non_missing: Mapping[str, Decimal] | None = None
                                 ) -> ResourceList:
    """AggregateContainerRequests: the app containers and every sidecar side by side, or else the busiest
    moment of initialisation, per resource.

    Init container i runs next to the sidecars started before it: InitContainerUse(i) = sidecars with index < i
    + init container i; a sidecar's own start counts as the sum of the sidecars up to and including it.
    ``non_missing`` (the scorer's NonMissingContainerRequests) stands in for a resource a container does not
    request at all (an explicit zero stays zero).
    """
    def requests(container: Mapping[str, Any]) -> ResourceList:
        own = container_requests(container)
        return {**{name: value for name, value in (non_missing or {}).items() if name not in own}, **own}

    total: ResourceList = {}
    for container in spec.get("containers") or []:
        _add(total, requests(container))
    sidecars: ResourceList = {}
    initialisation: ResourceList = {}
    for container in spec.get("initContainers") or []:
        own = requests(container)
        if container.get("restartPolicy") == _SIDECAR:
            _add(total, own)
            _add(sidecars, own)
            _raise_to(initialisation, sidecars)
        else:
            during = dict(own)
            _add(during, sidecars)
            _raise_to(initialisation, during)
    _raise_to(total, initialisation)
    return total


def pod_level_requests(spec: Mapping[str, Any]) -> ResourceList:
    """spec.resources.requests after defaultPodRequests, supported resources only.

    Only when pod-level limits are set does the apiserver fill in a missing pod-level request: from what the
    containers request for that resource if any container requests it, else from the pod-level limit.
    """
    pod_level = spec.get("resources") or {}
    explicit = _parsed(pod_level.get("requests"))
    limits = _parsed(pod_level.get("limits"))
    defaulted: ResourceList = {}
    if limits:
        containers = aggregate_container_requests(spec)
        defaulted = {name: value for name, value in containers.items() if name in POD_LEVEL_RESOURCES}
        defaulted.update({name: value for name, value in limits.items()
                          if name in POD_LEVEL_RESOURCES and name not in defaulted})
    merged = {**defaulted, **explicit}
    return {name: value for name, value in merged.items() if name in POD_LEVEL_RESOURCES}


def pod_requests(spec: Mapping[str, Any], non_missing: Mapping[str, Decimal] | None = None) -> ResourceList:
    """PodRequests: the containers' aggregate, pod-level requests in place of it where set, plus spec.overhead.

    Names a container requests at zero stay in the result (with value 0), as in the ResourceList upstream.
    """
    total = aggregate_container_requests(spec, non_missing)
    total.update(pod_level_requests(spec))
    _add(total, _parsed(spec.get("overhead")))
    return total
