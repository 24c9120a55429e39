"""Effective pod requests, computed the way kube-scheduler counts them.

Used for the ``expected-members`` a first-stage pod announces, and by the gate controller
to decide fits; both must count exactly like the scheduler or a "fit" is a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from gang.quantity import format_quantity, parse_quantity

Resources = dict[str, Decimal]

#: What a pod may set in ``spec.resources`` (IsSupportedPodLevelResource, KEP-2837).
POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})


def _add(total: Resources, extra: Mapping[str, Decimal]) -> None:
    for name, value in extra.items():
        total[name] = total.get(name, Decimal(0)) + value


def _max_into(total: Resources, other: Mapping[str, Decimal]) -> None:
    """maxResourceList: a resource named only in ``other`` is added even at zero (a request of 0 is a request, and
    pod-level defaulting asks whether containers request a resource at all)."""
    for name, value in other.items():
        if name not in total or value > total[name]:
            total[name] = value


def container_requests(container: Mapping[str, Any]) -> Resources:
    """Requests of one container; a limit without a request defaults the request (API defaulting)."""
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: parse_quantity(value) for name, value in merged.items()}


def _pod_level(spec: Mapping[str, Any], containers: Mapping[str, Decimal]) -> Resources:
    """``spec.resources.requests`` as the apiserver defaults it (defaultPodRequests): with pod-level limits set, a
    missing pod-level request is the containers' aggregate where they request the resource, else the limit."""
    pod_level = spec.get("resources") or {}
    requests = {name: parse_quantity(value) for name, value in (pod_level.get("requests") or {}).items()
                if name in POD_LEVEL_RESOURCES}
    limits = {name: parse_quantity(value) for name, value in (pod_level.get("limits") or {}).items()
              if name in POD_LEVEL_RESOURCES}
    if limits:
        for name in POD_LEVEL_RESOURCES - requests.keys():
            if name in containers:
                requests[name] = containers[name]
            elif name in limits:
                requests[name] = limits[name]
    return requests


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """max(init containers, app containers + sidecars) + overhead; pod-level requests win where set."""
    app: Resources = {}
    for container in spec.get("containers") or []:
        _add(app, container_requests(container))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or []:
        requests = container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(sidecars, requests)
            _max_into(init_peak, dict(sidecars))
        else:
            during = dict(sidecars)
            _add(during, requests)
            _max_into(init_peak, during)
    _add(app, sidecars)
    _max_into(app, init_peak)
    app.update(_pod_level(spec, app))
    _add(app, {name: parse_quantity(v) for name, v in (spec.get("overhead") or {}).items()})
    return {name: value for name, value in app.items() if value}


def format_requests(requests: Mapping[str, Decimal]) -> dict[str, str]:
    return {name: format_quantity(value, name) for name, value in sorted(requests.items())}
