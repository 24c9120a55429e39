"""Reasons that name the missing thing when no node passes a member's filters (``explain.no_node_text``), and the
never-fits reason built from them (``Feasibility``, the engine).

Every expected text is derived by hand from the nodes and the pod below: which filter each node fails, and whether
one filter alone rules out every node (then it is named: a resource no node has, a taint on every node, a selector
pair no node has), else how many nodes fail which filter first, in the scheduler's order (NodeUnschedulable,
NodeReadiness, TaintToleration, NodeAffinity, NodeResourcesFit).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from controller.engine import Engine, Verdict
from controller.explain import no_node_text
from controller.planner import plan
from controller.predicates import NodeInfo, PodInfo
from controller.problem import NodeFree, Unplaceable
from controller.state import ClusterState
from gang.config import Config
from tests.support.contract import GATE, GROUP, MIN
from tests.support.predicate_objects import expr, node, required

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"
CPU_ONLY = {"cpu": "8", "memory": "32Gi", "pods": "110"}
WITH_GPU = CPU_ONLY | {GPU: "4"}
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}


def pod(requests: dict[str, str] | None = None, **spec: Any) -> PodInfo:
    resources = {"requests": requests or {"cpu": "1"}}
    return PodInfo.of({"containers": [{"name": "main", "resources": resources}], **spec})


def looks(*nodes: dict[str, Any]) -> list[tuple[NodeInfo, int]]:
    return [(NodeInfo.of(n), 1) for n in nodes]


def test_no_node_has_the_resource() -> None:
    # cpu-a, cpu-b: no nvidia.com/gpu in allocatable; NodeResourcesFit fails on both.
    gpu_pod = pod({"cpu": "1", GPU: "1"})
    assert no_node_text(gpu_pod, looks(node("cpu-a"), node("cpu-b"))) == "no node has nvidia.com/gpu"
    # two resources, neither anywhere
    assert no_node_text(pod({GPU: "1", "example.com/fpga": "1"}), looks(node("cpu-a"))) == (
        "no node has example.com/fpga or nvidia.com/gpu")
    # each resource somewhere, never both on one node
    fpga = CPU_ONLY | {"example.com/fpga": "2"}
    assert no_node_text(pod({GPU: "1", "example.com/fpga": "1"}),
                        looks(node("a", allocatable=WITH_GPU), node("b", allocatable=fpga))) == (
        "no node has both example.com/fpga and nvidia.com/gpu")


def test_every_node_tainted() -> None:
    infra = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
    drain = {"key": "drain", "effect": "NoExecute"}
    soft = {"key": "spot", "value": "true", "effect": "PreferNoSchedule"}  # a score: filters nothing
    assert no_node_text(pod(), looks(node("a", taints=[infra, soft]), node("b", taints=[soft, infra]))) == (
        "every node is tainted dedicated=infra:NoSchedule, which the pod does not tolerate")
    assert no_node_text(pod(), looks(node("a", taints=[infra, drain]), node("b", taints=[drain, infra]))) == (
        "every node is tainted dedicated=infra:NoSchedule and drain:NoExecute, which the pod does not tolerate")
    # a different taint on each: none common; the first untolerated taint of each node, counted
    assert no_node_text(pod(), looks(node("a", taints=[infra]), node("b", taints=[infra]),
                                     node("c", taints=[drain]))) == (
        "every node has a taint the pod does not tolerate (dedicated=infra:NoSchedule on 2, drain:NoExecute on 1)")
    # tolerated, it is no reason; the other one still is
    tolerating = pod(tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert no_node_text(tolerating, looks(node("a", taints=[infra, drain]))) == (
        "every node is tainted drain:NoExecute, which the pod does not tolerate")


def test_no_node_matches_the_selector() -> None:
    nodes = looks(node("a", labels={"zone": "eu-1a", "pool": "batch"}),
                  node("b", labels={"zone": "eu-1c", "pool": "general"}))
    assert no_node_text(pod(nodeSelector={"zone": "eu-1x"}), nodes) == "no node matches the node selector zone=eu-1x"
    assert no_node_text(pod(nodeSelector={"pool": "gpu", "zone": "eu-1x"}), nodes) == (
        "no node matches the node selector pool=gpu, zone=eu-1x")
    # each pair matches a node, never both on one
    assert no_node_text(pod(nodeSelector={"pool": "batch", "zone": "eu-1c"}), nodes) == (
        "no node matches the whole node selector pool=batch, zone=eu-1c")


def test_no_node_matches_the_required_affinity() -> None:
    # generation 5 on a, 6 on b; both have a pool label: "!pool" holds on neither.
    nodes = looks(node("a", labels={"generation": "5", "pool": "batch"}),
                  node("b", labels={"generation": "6", "pool": "general"}))
    absent = required({"matchExpressions": [expr("generation", "Lt", "6"), expr("pool", "DoesNotExist")]})
    assert no_node_text(pod(**absent), nodes) == (
        "no node matches its required node affinity generation<6,!pool (no node satisfies !pool)")
    # two terms (ORed), each failing somewhere else
    either = required({"matchExpressions": [expr("pool", "In", "gpu", "tpu")]},
                      {"matchExpressions": [expr("generation", "Gt", "6")], "matchFields": [
                          {"key": "metadata.name", "operator": "In", "values": ["c"]}]})
    assert no_node_text(pod(**either), nodes) == (
        "no node matches its required node affinity pool in (gpu,tpu) or generation>6,metadata.name in (c)")
    # the selector leaves b; the affinity rules b out
    assert no_node_text(pod(nodeSelector={"pool": "general"}, **required(
        {"matchExpressions": [expr("generation", "NotIn", "6")]})), nodes) == (
        "no node matches both the node selector pool=general and its required node affinity generation notin (6) "
        "(no node satisfies generation notin (6))")


def test_cordoned_or_not_ready_everywhere() -> None:
    assert no_node_text(pod(), looks(node("a", unschedulable=True), node("b", unschedulable=True))) == (
        "every node is cordoned (unschedulable), and the pod does not tolerate node.kubernetes.io/unschedulable")
    assert no_node_text(pod(), looks(node("a", ready="False"), node("b", ready=None))) == "no node is ready"


def test_several_filters_each_rule_out_every_node() -> None:
    assert no_node_text(pod({GPU: "1"}, nodeSelector={"pool": "gpu"}), looks(node("a", labels={"pool": "cpu"}))) == (
        "no node matches the node selector pool=gpu; no node has nvidia.com/gpu")


def test_no_filter_rules_out_every_node_alone() -> None:
    """The gpu.yaml case: the GPU nodes are tainted, the CPU node has no GPU; each node's first failing filter."""
    nodes = [(NodeInfo.of(node("gpu-a", taints=[GPU_TAINT], allocatable=WITH_GPU)), 2),
             (NodeInfo.of(node("cpu-a")), 1), (NodeInfo.of(node("cpu-x", unschedulable=True)), 1)]
    assert no_node_text(pod({GPU: "1"}), nodes) == (
        "none of the 4 nodes passes its filters: 2 are tainted nvidia.com/gpu=present:NoSchedule, 1 is cordoned, "
        "1 is without nvidia.com/gpu")
    assert no_node_text(pod(nodeSelector={"zone": "b"}), looks(node("a", labels={"zone": "a"}), node(
        "b", labels={"zone": "b"}, ready="Unknown"))) == (
        "none of the 2 nodes passes its filters: 1 is not ready, 1 is without label zone=b")


def test_no_nodes_at_all() -> None:
    assert no_node_text(pod(), []) == "the cluster has no nodes"


# --- through the engine: the never-fits reason names it -----------------------------------------------------------


def gated(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml", "uid": name, "creationTimestamp": "2026-11-22T09:00:00Z",
                         "labels": {GROUP: "train", MIN: "2"}},
            "spec": {"schedulingGates": [{"name": GATE}], **spec}}


def test_a_gang_requesting_a_resource_no_node_has_never_fits_and_says_which() -> None:
    state = ClusterState()
    for i in range(5):  # one node kind: the filters run once, the reason counts all five
        state.upsert_node(node(f"cpu-{i}", labels={"pool": "cpu"}))
    container = {"name": "main", "resources": {"requests": {"cpu": "1", GPU: "1"}, "limits": {GPU: "1"}}}
    for i in range(2):
        state.upsert_pod(gated(f"train-{i}", {"containers": [container]}), 0.0)
    [decision] = Engine(state, Config()).cycle(60.0).gangs
    assert (decision.decision, decision.reason) == (
        Verdict.NEVER_FITS, "member train-0 can run on no node: no node has nvidia.com/gpu")

    state.upsert_node(node("gpu-0", labels={"pool": "gpu"}, taints=[GPU_TAINT], allocatable=WITH_GPU))
    [decision] = Engine(state, Config()).cycle(60.0).gangs
    assert (decision.decision, decision.reason) == (
        Verdict.NEVER_FITS, "member train-0 can run on no node: none of the 6 nodes passes its filters: 5 are without "
                            "nvidia.com/gpu, 1 is tainted nvidia.com/gpu=present:NoSchedule")


def test_the_planner_words_a_member_without_nodes_with_its_reason() -> None:
    """Replacements and late members are planned without the never-fits check: their shortfall names it too."""
    lost = Unplaceable("w-3", {"cpu": Decimal(1)}, frozenset(), no_node="no node has nvidia.com/gpu")
    found = plan([lost], [NodeFree("cpu-0", {"cpu": Decimal(8), "pods": Decimal(110)})])
    assert found.shortfall == ("member w-3 can run on no node: no node has nvidia.com/gpu; the largest placement found "
                               "holds 0 of 1 members")
