"""Nodes (labels, taints, conditions, allocatable) and required node-affinity terms for the static predicates."""

from __future__ import annotations

from typing import Any


def node(
    name: str = "n1",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    ready: str | None = "True",
    allocatable: dict[str, str] | None = None,
) -> dict[str, Any]:
    conditions = [] if ready is None else [{"type": "MemoryPressure", "status": "False"},
                                          {"type": "Ready", "status": ready}]
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {"conditions": conditions,
                   "allocatable": allocatable or {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


GPU = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
