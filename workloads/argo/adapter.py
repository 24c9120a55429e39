"""Argo Workflow: pods appear step by step, so there is no static gang. Only a size the user
gives explicitly (``kubenexus.io/min-available`` on the Workflow) makes one."""

from __future__ import annotations

from gang import keys
from gang.adapters.base import Chain, Membership, Obj, WorkloadAdapter, as_int, name_of, not_member
from gang.kinds import Kind


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


ADAPTERS: tuple[WorkloadAdapter, ...] = (WorkflowAdapter(),)
