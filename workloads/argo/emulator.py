"""Argo Workflows controller (argoproj.io/v1alpha1 Workflow), for container and steps templates.

The entrypoint template runs either as a single pod named after the workflow (a container or
script template) or, for ``steps``, group by group: the pods of step group k+1 are created only
after every pod of group k Succeeded (steps within a group run in parallel). Pods are named as
POD_NAMES=v2 does, ``<workflow>-<template>-<fnv32a(node name)>``, owned by the Workflow, with a
``wait`` sidecar next to ``main``. DAGs, nested steps, retries and artifacts are not emulated.

Each pod is a node of ``status.nodes`` (by node id), created once: the node follows its pod's phase, and a node
whose pod is gone before it completed is marked Error, "pod deleted" (``podReconciliation``); Argo never creates
that pod again. A Failed or errored node fails its step group: the workflow ends Failed ("child '<node id>'
failed"); a single-pod entrypoint ends the workflow with the node's own phase (Error for a deleted pod).
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


_COMPLETED = ("Succeeded", "Failed", "Error", "Skipped", "Omitted")


def _node_id(wf: Obj, node_name: str) -> str:
    name = wf["metadata"]["name"]
    return f"{name}-{fnv32a(node_name)}"


def _steps(wf: Obj) -> list[list[tuple[str, Obj]]]:
    """Step groups of (node name, template) for the entrypoint."""
    spec, name = wf.get("spec") or {}, wf["metadata"]["name"]
    templates = {t.get("name"): t for t in spec.get("templates") or []}
    entry: Obj = templates.get(spec.get("entrypoint")) or next(iter(templates.values()), {})
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
        nodes = dict(status.get("nodes") or {})
        result, message, groups = "Succeeded", "", _steps(wf)
        for group in groups:
            phases = []
            for node_name, template in group:
                pod_name, node_id = self._pod_name(wf, node_name, template), _node_id(wf, node_name)
                node = nodes.get(node_id)
                if node is None and self.create(PODS, wf, self._pod(wf, node_name, template, pod_name)) is None:
                    node = {"phase": "Pending"}  # refused: tried again on the next pass
                elif node is None:
                    node = nodes[node_id] = {"id": node_id, "name": node_name, "displayName": node_name,
                                             "type": "Pod", "templateName": template.get("name", ""),
                                             "phase": "Pending", "startedAt": now()}
                elif node["phase"] not in _COMPLETED:
                    node = nodes[node_id] = self._assess(node, pods.get(pod_name))
                phases.append(node["phase"])
                if node["phase"] in ("Failed", "Error") and not message:
                    message = node.get("message", "") if len(groups) == 1 and len(group) == 1 \
                        else f"child '{node_id}' failed"
            if any(p in ("Failed", "Error") for p in phases):
                single = len(groups) == 1 and len(group) == 1
                result = next(p for p in phases if p in ("Failed", "Error")) if single else "Failed"
                break
            if any(p != "Succeeded" for p in phases):
                result, message = "Running", ""
                break
        update: Obj = {"phase": result, "startedAt": status.get("startedAt") or now(), "nodes": nodes}
        if result != "Running":
            update["finishedAt"] = now()
            if message:
                update["message"] = message
        self.patch_status(WORKFLOWS, wf, update)

    @staticmethod
    def _assess(node: Obj, pod: Obj | None) -> Obj:
        """The node as its pod says (``assessNodeStatus``), or Error when the pod is gone."""
        if pod is None:
            return {**node, "phase": "Error", "message": "pod deleted", "finishedAt": now()}
        pod_phase = phase(pod)
        updated = {**node, "phase": pod_phase if pod_phase in ("Pending", "Running", "Succeeded", "Failed")
                   else node["phase"]}
        if pod_phase == "Failed":
            updated["message"] = (pod.get("status") or {}).get("message") or "pod failed"
        if pod_phase in ("Succeeded", "Failed"):
            updated["finishedAt"] = now()
        return updated

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
                             "annotations": {f"{P}/node-name": node, f"{P}/node-id": _node_id(wf, node)},
                             "ownerReferences": [owner_ref(wf)]},
                "spec": pod_spec}


OPERATORS: dict[str, type[Operator]] = {"workflow-controller": WorkflowController}
