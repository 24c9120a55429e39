"""Argo Workflows controller (argoproj.io/v1alpha1 Workflow), for container and steps templates.

The entrypoint template runs either as a single pod named after the workflow (a container or
script template) or, for ``steps``, group by group: the pods of step group k+1 are created only
after every pod of group k Succeeded (steps within a group run in parallel). Pods are named as
POD_NAMES=v2 does, ``<workflow>-<template>-<fnv32a(node name)>``, owned by the Workflow, with a
``wait`` sidecar next to ``main``. DAGs, nested steps, retries and artifacts are not emulated.
"""

from __future__ import annotations

import copy

from cluster.operators.base import PODS, Operator, owner_ref, phase
from cluster.store import Obj, now

WORKFLOWS = ("argoproj.io", "v1alpha1", "workflows")
P = "workflows.argoproj.io"
EXECUTOR_IMAGE = "quay.io/argoproj/argoexec:v3.6.2"


def fnv32a(text: str) -> int:
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def _steps(wf: Obj) -> list[list[tuple[str, Obj]]]:
    """Step groups of (node name, template) for the entrypoint."""
    spec, name = wf.get("spec") or {}, wf["metadata"]["name"]
    templates = {t.get("name"): t for t in spec.get("templates") or []}
    entry = templates.get(spec.get("entrypoint")) or next(iter(templates.values()), {})
    if "steps" not in entry:
        return [[(name, entry)]]
    return [[(f"{name}[{k}].{step.get('name')}", templates.get(step.get("template"), {})) for step in group]
            for k, group in enumerate(entry["steps"] or [])]


class WorkflowController(Operator):
    root = WORKFLOWS
    identity = ("argo", "argo")

    def sync(self, wf: Obj) -> None:
        status = wf.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed", "Error"):
            return
        pods = {p["metadata"]["name"]: p for p in self.children(PODS, wf)}
        result = "Succeeded"
        for group in _steps(wf):
            phases = []
            for node, template in group:
                pod_name = self._pod_name(wf, node, template)
                if pod_name not in pods:
                    self.create(PODS, wf, self._pod(wf, node, template, pod_name))
                phases.append(phase(pods[pod_name]) if pod_name in pods else "Pending")
            if "Failed" in phases:
                result = "Failed"
                break
            if any(p != "Succeeded" for p in phases):
                result = "Running"
                break
        update: Obj = {"phase": result, "startedAt": status.get("startedAt") or now()}
        if result != "Running":
            update["finishedAt"] = now()
        self.patch_status(WORKFLOWS, wf, update)

    @staticmethod
    def _pod_name(wf: Obj, node: str, template: Obj) -> str:
        name = wf["metadata"]["name"]
        return name if node == name else f"{name}-{template.get('name', '')}-{fnv32a(node)}"

    @staticmethod
    def _pod(wf: Obj, node: str, template: Obj, pod_name: str) -> Obj:
        spec, name = wf.get("spec") or {}, wf["metadata"]["name"]
        main = copy.deepcopy(template.get("container") or template.get("script") or {})
        main.pop("source", None)
        main["name"] = "main"
        wait = {"name": "wait", "image": EXECUTOR_IMAGE, "command": ["argoexec"],
                "args": ["wait", "--loglevel", "info"]}
        extra = {**((spec.get("podMetadata") or {}).get("labels") or {}),
                 **((template.get("metadata") or {}).get("labels") or {})}
        pod_spec: Obj = {"containers": [wait, main], "restartPolicy": "Never"}
        for key in ("serviceAccountName", "nodeSelector", "tolerations", "affinity", "schedulerName",
                    "priorityClassName"):
            value = template.get(key) or spec.get(key)
            if value:
                pod_spec[key] = copy.deepcopy(value)
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name, "labels": {**extra, f"{P}/workflow": name, f"{P}/completed": "false"},
                             "annotations": {f"{P}/node-name": node, f"{P}/node-id": f"{name}-{fnv32a(node)}"},
                             "ownerReferences": [owner_ref(wf)]},
                "spec": pod_spec}
