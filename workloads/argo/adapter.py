"""Argo Workflow: pods appear step by step, so there is no static gang. Only a size the user
gives explicitly (``kubenexus.io/min-available`` on the Workflow) makes one."""

from __future__ import annotations

import copy

from gang import keys
from gang.adapters.base import (
    Chain,
    Membership,
    Obj,
    WorkloadAdapter,
    as_int,
    controller_ref,
    mapping,
    name_of,
    not_member,
    spec,
)
from gang.kinds import Kind

LABEL_PREFIX = "workflows.argoproj.io"
EXECUTOR_IMAGE = "quay.io/argoproj/argoexec:v3.6.2"  # the controller's wait sidecar
POD_FIELDS = ("serviceAccountName", "nodeSelector", "tolerations", "affinity", "schedulerName", "priorityClassName")


def fnv32a(text: str) -> int:
    """FNV-1a, 32 bits: the hash in Argo's pod names (POD_NAMES=v2)."""
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def first_step(workflow: Obj) -> list[tuple[str, Obj]]:
    """(node name, template) of the pods Argo creates first: the entrypoint itself (a container or script), or
    its first step group."""
    workflow_spec, name = spec(workflow), name_of(workflow)
    templates = {t.get("name"): t for t in map(mapping, workflow_spec.get("templates") or [])}
    entry = templates.get(workflow_spec.get("entrypoint")) or next(iter(templates.values()), {})
    if "steps" not in entry:
        return [(name, entry)]
    first = (entry.get("steps") or [[]])[0]
    return [(f"{name}[0].{step.get('name')}", templates.get(step.get("template"), {})) for step in map(mapping, first)]


def step_pod(workflow: Obj, node: str, template: Obj) -> Obj:
    """A step's pod: ``main`` (the template's container) next to Argo's ``wait`` sidecar, named by its node."""
    workflow_spec, name = spec(workflow), name_of(workflow)
    main = copy.deepcopy(mapping(template.get("container") or template.get("script")))
    main.pop("source", None)
    main["name"] = "main"
    wait = {"name": "wait", "image": EXECUTOR_IMAGE, "command": ["argoexec"], "args": ["wait", "--loglevel", "info"]}
    pod_spec: Obj = {"containers": [wait, main], "restartPolicy": "Never"}
    for field in POD_FIELDS:
        value = template.get(field) or workflow_spec.get(field)
        if value:
            pod_spec[field] = copy.deepcopy(value)
    labels = {**mapping(mapping(workflow_spec.get("podMetadata")).get("labels")),
              **mapping(mapping(template.get("metadata")).get("labels")),
              f"{LABEL_PREFIX}/workflow": name, f"{LABEL_PREFIX}/completed": "false"}
    pod_name = name if node == name else f"{name}-{template.get('name', '')}-{fnv32a(node)}"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "labels": labels,
                         "annotations": {f"{LABEL_PREFIX}/node-name": node,
                                         f"{LABEL_PREFIX}/node-id": f"{name}-{fnv32a(node)}"},
                         "ownerReferences": [controller_ref(workflow)]},
            "spec": pod_spec}


class WorkflowAdapter(WorkloadAdapter):
    kind = Kind("argoproj.io", "Workflow", "workflows")

    def pod_count(self, root: Obj) -> int | None:
        return None

    def membership(self, pod: Obj, chain: Chain) -> Membership:
        annotations = (chain.root.get("metadata") or {}).get("annotations") or {}
        size = as_int(annotations.get(keys.MIN_AVAILABLE), 0)
        if not size:
            return not_member(f"Argo Workflow pods appear step by step; set {keys.MIN_AVAILABLE} "
                              "on the Workflow to gang them")
        return Membership(True, f"Argo Workflow with an explicit size of {size}", name_of(chain.root), size)

    def created(self, root: Obj) -> list[Obj] | None:
        """The entrypoint's pod, or its first step group's pods (the next group comes once these succeeded)."""
        return [step_pod(root, node, template) for node, template in first_step(root)]


ADAPTERS: tuple[WorkloadAdapter, ...] = (WorkflowAdapter(),)
