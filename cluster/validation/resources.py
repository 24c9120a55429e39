"""Container resources (ValidateContainerResourceRequirements and its helpers): which names a container may
request, non-negative and (for extended resources) whole quantities, requests within limits."""

from __future__ import annotations

import decimal
from typing import Any

from cluster.quantity import Quantity, parse_or_none
from cluster.validation.errors import forbidden, invalid, required
from cluster.validation.names import qualified_name

_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_STANDARD_RESOURCES = _STANDARD_CONTAINER_RESOURCES | {
    "requests.cpu", "requests.memory", "requests.ephemeral-storage", "limits.cpu", "limits.memory",
    "limits.ephemeral-storage", "pods", "resourcequotas", "services", "replicationcontrollers", "secrets",
    "configmaps", "persistentvolumeclaims", "storage", "requests.storage", "services.nodeports",
    "services.loadbalancers",
}
_INTEGER_RESOURCES = frozenset({"pods", "resourcequotas", "services", "replicationcontrollers", "secrets",
                                "configmaps", "persistentvolumeclaims", "services.nodeports",
                                "services.loadbalancers"})


def _is_native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _is_hugepages(name: str) -> bool:
    return name.startswith("hugepages-")


def is_extended(name: str) -> bool:
    return not _is_native(name) and not name.startswith("requests.") and not qualified_name(f"requests.{name}")


def _overcommit_allowed(name: str) -> bool:
    """Native resources other than hugepages may request less than their limit; others must be equal."""
    return _is_native(name) and not _is_hugepages(name)


def _resource_name_errors(name: str, path: str) -> list[str]:
    """validateContainerResourceName: cpu, memory, ephemeral-storage, hugepages-*, or an extended resource."""
    errs = [invalid(path, name, m) for m in qualified_name(name)]
    if "/" not in name:
        if not errs and name not in _STANDARD_RESOURCES and not name.startswith(("hugepages-", "requests.hugepages-")):
            errs.append(invalid(path, name, "must be a standard resource type or fully qualified"))
        if name not in _STANDARD_CONTAINER_RESOURCES and not _is_hugepages(name):
            errs.append(invalid(path, name, "must be a standard resource for containers"))
    elif not _is_native(name) and not is_extended(name):
        errs.append(invalid(path, name, "doesn't follow extended resource name standard"))
    return errs


def _quantity_value_errors(name: str, quantity: Quantity, path: str) -> list[str]:
    """Non-negative; whole numbers for extended (device) resources such as nvidia.com/gpu."""
    errs = [invalid(path, str(quantity), "must be greater than or equal to 0")] if quantity.value < 0 else []
    if name in _INTEGER_RESOURCES or is_extended(name):
        milli = (quantity.value * 1000).to_integral_value(rounding=decimal.ROUND_CEILING)
        if milli % 1000:
            errs.append(invalid(path, quantity, "must be an integer"))
    return errs


def _parsed_resources(resources: Any, path: str) -> tuple[dict[str, Quantity], list[str]]:
    """Quantities that decode (the rest are decode_errors), with their name and value errors."""
    parsed, errs = {}, []
    for name, raw in (resources or {}).items():
        errs += _resource_name_errors(name, f"{path}[{name}]")
        quantity = parse_or_none(raw)
        if quantity is not None:
            parsed[name] = quantity
            errs += _quantity_value_errors(name, quantity, f"{path}[{name}]")
    return parsed, errs


def resources_errors(resources: Any, path: str) -> list[str]:
    """ValidateContainerResourceRequirements: request <= limit, and == limit where overcommit is not allowed."""
    resources = resources or {}
    limits, errs = _parsed_resources(resources.get("limits"), f"{path}.limits")
    requests, request_errs = _parsed_resources(resources.get("requests"), f"{path}.requests")
    errs += request_errs
    for name, request in requests.items():
        limit = limits.get(name)
        if limit is None:
            if name not in (resources.get("limits") or {}) and not _overcommit_allowed(name):
                errs.append(required(f"{path}.limits", "Limit must be set for non overcommitable resources"))
        elif request.value != limit.value and not _overcommit_allowed(name):
            errs.append(invalid(f"{path}.requests", str(request), f"must be equal to {name} limit of {limit}"))
        elif request.value > limit.value:
            errs.append(invalid(f"{path}.requests", str(request),
                                f"must be less than or equal to {name} limit of {limit}"))
    names = set(limits) | set(requests)
    if any(map(_is_hugepages, names)) and not names & {"cpu", "memory"}:
        errs.append(forbidden(path, "HugePages require cpu or memory"))
    return errs
