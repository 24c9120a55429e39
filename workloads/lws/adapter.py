"""LeaderWorkerSet: one gang per group (leader + workers), ``spec.replicas`` groups apart.

The group index and revision come from the pod name ordinal and the owner chain, which
exist before LWS's own webhook adds its index labels (it may run after ours). Under
``startupPolicy: LeaderReady`` workers are created after the leader is Ready, so the leader
announces them.
"""

from __future__ import annotations

from typing import Any, TypedDict

from gang.adapters.base import (
    Chain,
    Membership,
    Obj,
    WorkloadAdapter,
    as_int,
    expected_from_template,
    labels_of,
    mapping,
    name_of,
    not_member,
    spec,
)
from gang.kinds import Kind
from gang.shapes import PodTemplate

GROUP = "leaderworkerset.x-k8s.io"
REVISION_LABEL = "leaderworkerset.sigs.k8s.io/template-revision-hash"


class _TemplateShape(TypedDict, total=False):
    size: Any
    workerTemplate: PodTemplate


class _LeaderWorkerSetShape(TypedDict, total=False):
    startupPolicy: Any
    leaderWorkerTemplate: _TemplateShape


def _group_size(lws: Obj) -> int:
    return max(as_int(mapping(spec(lws).get("leaderWorkerTemplate")).get("size"), 1), 1)


def _ordinal(name: str) -> str | None:
    suffix = name.rpartition("-")[2]
    return suffix if suffix.isdigit() else None


class LeaderWorkerSetAdapter(WorkloadAdapter):
    kind = Kind(GROUP, "LeaderWorkerSet", "leaderworkersets")
    spec_shape = _LeaderWorkerSetShape

    def pod_count(self, root: Obj) -> int | None:
        return _group_size(root)

    def membership(self, pod: Obj, chain: Chain) -> Membership:
        lws = chain.root
        leader = chain.find("", "Pod")
        worker = leader is not None
        index = _ordinal(name_of(leader)) if worker else _ordinal(name_of(pod))
        if index is None and worker:
            index = _ordinal(name_of(chain.objects[0]))  # the worker StatefulSet <lws>-<index>
        if index is None:
            return not_member("cannot tell the LeaderWorkerSet group index from the pod name")
        revision = labels_of(pod).get(REVISION_LABEL) or labels_of(leader).get(REVISION_LABEL)
        group = f"{name_of(lws)}-{index}" + (f"-{revision}" if revision else "")
        size = _group_size(lws)
        template = mapping(spec(lws).get("leaderWorkerTemplate"))
        if spec(lws).get("startupPolicy") != "LeaderReady" or size == 1:
            return Membership(True, f"LeaderWorkerSet group {index}: leader and workers together", group, size)
        if worker:
            return Membership(True, f"LeaderWorkerSet group {index} worker: late member (LeaderReady)",
                              group, size, late=True)
        expected = expected_from_template("worker", size - 1, template.get("workerTemplate"))
        return Membership(True, f"LeaderWorkerSet group {index} leader: first stage (LeaderReady)",
                          group, size, expected=(expected,))


ADAPTERS: tuple[WorkloadAdapter, ...] = (LeaderWorkerSetAdapter(),)
