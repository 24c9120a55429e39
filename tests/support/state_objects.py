"""Minimal nodes and pods for the controller's ClusterState: a node of so many cpus, a pod requesting cpu, a gang
member or not."""

from __future__ import annotations

from typing import Any

from controller.state import ClusterState
from gang.adapters.table import ROOT_RESOURCES
from tests.support.contract import GATE, GROUP, MIN, OWNER_UID, PLANNED_NODE


def node(name: str, cpu: str = "8", pods: str = "10", **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": extra.get("spec", {}),
            "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": pods},
                       "conditions": [{"type": "Ready", "status": extra.get("ready", "True")}]}}


def pod(name: str, cpu: str, *, node_name: str = "", gated: bool = False, phase: str = "Pending",
        planned: str = "", gang: bool = True, owner_kind: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                            "creationTimestamp": "2026-11-22T10:00:00Z", "labels": {}, "annotations": {}}
    if gang:
        meta["labels"] = {GROUP: "job", MIN: "2"}
        meta["annotations"] = {OWNER_UID: "root-1"}
    if planned:
        meta["annotations"][PLANNED_NODE] = planned
    if owner_kind:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner_kind, "name": "x", "uid": "o",
                                    "controller": True}]
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def root(api_version: str, kind: str, name: str, uid: str, annotations: dict[str, str] | None = None,
         namespace: str = "ml") -> dict[str, Any]:
    """A root object (PyTorchJob, JobSet, ...) as the controller's watch of roots delivers it."""
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": dict(annotations or {})}}


def watch_roots(state: ClusterState, *roots: dict[str, Any]) -> None:
    """Every root resource listed by the controller's watch, and these roots in it."""
    for resource in ROOT_RESOURCES:
        state.roots.watching(resource.group, resource.version, resource.kind, "")
    for obj in roots:
        state.upsert_root(obj["apiVersion"].rpartition("/")[0], obj["kind"], obj)
