"""controller.predicates: kube-scheduler's static Filter plugins, one small filter each, each with its own table.

Expected answers are derived by hand from the scheduler's documented rules:
- Toleration.ToleratesTaint (k8s.io/api core/v1 toleration.go): empty effect matches all effects,
  empty key (with Exists) all keys, Equal (default) compares values, Exists any value, Lt/Gt
  compare the taint value with the toleration value as int64.
- TaintToleration Filter: only NoSchedule and NoExecute taints must be tolerated.
- NodeUnschedulable Filter: spec.unschedulable is out unless the pod tolerates
  {node.kubernetes.io/unschedulable, NoSchedule}.
- Node lifecycle controller: Ready=False taints node.kubernetes.io/not-ready:NoSchedule,
  Ready=Unknown node.kubernetes.io/unreachable:NoSchedule; DefaultTolerationSeconds gives every
  pod NoExecute tolerations for both, which don't tolerate the NoSchedule taint.
- NodeAffinity (component-helpers nodeaffinity): nodeSelector labels must all be equal; terms are
  ORed, requirements ANDed; an empty term matches nothing; a term with a parse error (wrong value
  count, non-integer Gt/Lt value, unknown operator) matches nothing; matchFields supports only
  metadata.name with In/NotIn and exactly one value.
- NodePorts / HostPortInfo.CheckConflict: (hostIP, protocol, hostPort) with "" -> 0.0.0.0 and
  "" -> TCP; 0.0.0.0 conflicts with every IP on the same protocol and port; restartable init
  containers count (kubernetes#132040); hostNetwork defaults hostPort to containerPort.
- NodeResourcesFit: a requested resource the node's allocatable lacks counts as zero.
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pytest

from controller.capacity import requests_of
from controller.predicates import (
    ANY_HOST_IP,
    FILTERS,
    TAINT_NOT_READY,
    TAINT_UNREACHABLE,
    TAINT_UNSCHEDULABLE,
    Filter,
    NodeAffinity,
    NodeInfo,
    NodeReadiness,
    NodeResourcesFit,
    NodeUnschedulable,
    PodInfo,
    TaintToleration,
    certifiability,
    feasible,
    host_port_conflict,
    host_ports,
    tolerates,
    unfit,
)
from gang import keys
from tests.support.predicate_objects import GPU, expr, node, required

pytestmark = pytest.mark.unit

D = Decimal
AFFINITY = "node(s) didn't match Pod's node affinity/selector"


def check(plugin: Filter, spec: dict[str, Any], obj: dict[str, Any],
          requests: dict[str, Decimal] | None = None) -> str | None:
    """One filter on its own: None when the node passes, else its reason."""
    found = plugin.filter(PodInfo.of(spec, requests), NodeInfo.of(obj))
    return None if found is None else found.reason


def matches_selector_and_affinity(spec: dict[str, Any], obj: dict[str, Any]) -> str | None:
    return check(NodeAffinity(), spec, obj)


def has_resources_kinds(requests: dict[str, Decimal], obj: dict[str, Any]) -> str | None:
    return check(NodeResourcesFit(), {}, obj, requests)


def feasible_nodes(spec: dict[str, Any], objs: list[dict[str, Any]]) -> tuple[list[str], dict[str, str]]:
    """The nodes passing every filter, and the first reason of each other one."""
    pod, nodes = PodInfo.of(spec), [NodeInfo.of(obj) for obj in objs]
    return feasible(pod, nodes), {n.name: found.reason for n in nodes if (found := unfit(pod, n)) is not None}


# --- Toleration.ToleratesTaint -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        # Equal compares key, value and effect.
        ({"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}, GPU, True),
        ({"key": "gpu", "operator": "Equal", "value": "false", "effect": "NoSchedule"}, GPU, False),
        # An omitted operator means Equal; omitted values on both sides are equal ("").
        ({"key": "gpu", "value": "true"}, GPU, True),
        ({"key": "dedicated"}, {"key": "dedicated", "effect": "NoSchedule"}, True),
        ({"key": "dedicated"}, {"key": "dedicated", "value": "x", "effect": "NoSchedule"}, False),
        # Exists: any value of that key.
        ({"key": "gpu", "operator": "Exists"}, GPU, True),
        ({"key": "gpu", "operator": "Exists"}, {"key": "tpu", "value": "true", "effect": "NoSchedule"}, False),
        # Empty key with Exists: every key and value; empty effect: every effect.
        ({"operator": "Exists"}, {"key": "anything", "value": "v", "effect": "NoExecute"}, True),
        ({"operator": "Exists", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}, False),
        ({"key": "gpu", "operator": "Exists"}, {"key": "gpu", "effect": "NoExecute"}, True),
        ({"key": "gpu", "operator": "Exists"}, {"key": "gpu", "effect": "PreferNoSchedule"}, True),
        # A set effect must equal the taint's.
        ({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, GPU, False),
        ({"key": "gpu", "operator": "Exists", "effect": "PreferNoSchedule"}, GPU, False),
        ({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}, GPU, True),
        # Lt / Gt: the taint's value compared with the toleration's, as int64.
        ({"key": "tier", "operator": "Lt", "value": "5"}, {"key": "tier", "value": "3", "effect": "NoSchedule"}, True),
        ({"key": "tier", "operator": "Lt", "value": "5"}, {"key": "tier", "value": "5", "effect": "NoSchedule"}, False),
        ({"key": "tier", "operator": "Lt", "value": "5"}, {"key": "tier", "value": "7", "effect": "NoSchedule"}, False),
        ({"key": "tier", "operator": "Gt", "value": "5"}, {"key": "tier", "value": "7", "effect": "NoSchedule"}, True),
        ({"key": "tier", "operator": "Gt", "value": "5"}, {"key": "tier", "value": "5", "effect": "NoSchedule"}, False),
        ({"key": "tier", "operator": "Gt", "value": "-2"}, {"key": "tier", "value": "-1", "effect": "NoSchedule"},
         True),
        # ParseInt(s, 10, 64) fails on non-digits, spaces, underscores and out-of-range numbers.
        ({"key": "tier", "operator": "Gt", "value": "5"}, {"key": "tier", "value": "high", "effect": "NoSchedule"},
         False),
        ({"key": "tier", "operator": "Gt", "value": "x"}, {"key": "tier", "value": "7", "effect": "NoSchedule"}, False),
        ({"key": "tier", "operator": "Gt", "value": "5"}, {"key": "tier", "value": " 7", "effect": "NoSchedule"},
         False),
        ({"key": "tier", "operator": "Gt", "value": "5"}, {"key": "tier", "value": "1_0", "effect": "NoSchedule"},
         False),
        ({"key": "tier", "operator": "Lt", "value": "5"},
         {"key": "tier", "value": str(-(2**63) - 1), "effect": "NoSchedule"}, False),
        # An unknown operator tolerates nothing.
        ({"key": "gpu", "operator": "Matches", "value": "true"}, GPU, False),
    ],
)
def test_tolerates(toleration, taint, expected):
    assert tolerates(toleration, taint) is expected


# --- NodeUnschedulable ----------------------------------------------------------------------------

UNSCHEDULABLE = "node(s) were unschedulable"


@pytest.mark.parametrize(
    ("tolerations", "unschedulable", "expected"),
    [
        ([], False, None),
        ([], True, UNSCHEDULABLE),
        ([{"key": TAINT_UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"}], True, None),
        ([{"key": TAINT_UNSCHEDULABLE, "operator": "Exists"}], True, None),  # empty effect: all effects
        ([{"key": TAINT_UNSCHEDULABLE}], True, None),  # Equal with value "" equals the synthetic taint's empty value
        ([{"operator": "Exists"}], True, None),  # tolerate everything (DaemonSet-style)
        # The toleration must cover NoSchedule.
        ([{"key": TAINT_UNSCHEDULABLE, "operator": "Exists", "effect": "NoExecute"}], True, UNSCHEDULABLE),
    ],
)
def test_node_unschedulable(tolerations, unschedulable, expected):
    assert check(NodeUnschedulable(), {"tolerations": tolerations}, node(unschedulable=unschedulable)) == expected


# --- NodeReadiness ----------------------------------------------------------------------------------

NOT_READY = "node(s) were not ready"
# What DefaultTolerationSeconds adds to every pod.
DEFAULT_TOLERATIONS = [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                       for key in (TAINT_NOT_READY, TAINT_UNREACHABLE)]


@pytest.mark.parametrize(
    ("tolerations", "ready", "expected"),
    [
        ([], "True", None),
        ([], "False", NOT_READY),
        ([], "Unknown", NOT_READY),
        ([], None, NOT_READY),  # never posted status = Unknown
        ([{"key": TAINT_NOT_READY, "operator": "Exists", "effect": "NoSchedule"}], "False", None),
        ([{"key": TAINT_NOT_READY, "operator": "Exists"}], "False", None),
        # The default NoExecute tolerations do not admit a node that is not ready.
        (DEFAULT_TOLERATIONS, "False", NOT_READY),
        (DEFAULT_TOLERATIONS, "Unknown", NOT_READY),
        # Unknown readiness needs the unreachable toleration.
        ([{"key": TAINT_NOT_READY, "operator": "Exists", "effect": "NoSchedule"}], "Unknown", NOT_READY),
        ([{"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoSchedule"}], "Unknown", None),
        ([{"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoSchedule"}], None, None),
    ],
)
def test_node_readiness(tolerations, ready, expected):
    assert check(NodeReadiness(), {"tolerations": tolerations}, node(ready=ready)) == expected


# --- TaintToleration --------------------------------------------------------------------------------

TEAM_ML = {"key": "team", "value": "ml", "effect": "NoSchedule"}
THREE_TAINTS = [GPU, {"key": "zone-a", "effect": "NoExecute"}, TEAM_ML]
GPU_AND_ZONE = [{"key": "gpu", "operator": "Exists"}, {"key": "zone-a", "operator": "Exists"}]


@pytest.mark.parametrize(
    ("tolerations", "taints", "expected"),
    [
        ([], [], None),
        # Untolerated NoSchedule and NoExecute taints are named.
        ([], [GPU], "node(s) had untolerated taint {gpu=true:NoSchedule}"),
        ([], [{"key": "maintenance", "value": "soon", "effect": "NoExecute"}],
         "node(s) had untolerated taint {maintenance=soon:NoExecute}"),
        ([], [{"key": "dedicated", "effect": "NoSchedule"}], "node(s) had untolerated taint {dedicated:NoSchedule}"),
        # PreferNoSchedule is only a score.
        ([], [{"key": "spot", "effect": "PreferNoSchedule"}], None),
        # Tolerated taints pass and the first untolerated one is reported.
        (GPU_AND_ZONE, THREE_TAINTS, "node(s) had untolerated taint {team=ml:NoSchedule}"),
        ([*GPU_AND_ZONE, TEAM_ML], THREE_TAINTS, None),
    ],
)
def test_taint_toleration(tolerations, taints, expected):
    assert check(TaintToleration(), {"tolerations": tolerations}, node(taints=taints)) == expected


def test_expected_member_description_uses_its_tolerations():
    member = {"role": "executor", "count": 3, "requests": {"cpu": "1"}, "nodeSelector": {},
              "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}], "affinity": None}
    assert check(TaintToleration(), member, node(taints=[GPU])) is None
    assert check(TaintToleration(), {**member, "tolerations": []}, node(taints=[GPU])) is not None


# --- Every filter, in the scheduler's order ------------------------------------------------------------


def test_ready_untainted_node_accepts_any_pod():
    assert unfit(PodInfo.of({}), NodeInfo.of(node())) is None


def test_unschedulable_is_reported_before_readiness():
    found = unfit(PodInfo.of({}), NodeInfo.of(node(unschedulable=True, ready="False")))
    assert found is not None and isinstance(found.filter, NodeUnschedulable) and found.reason == UNSCHEDULABLE


def test_filters_run_in_the_schedulers_order():
    assert [f.name for f in FILTERS] == ["NodeUnschedulable", "NodeReadiness", "TaintToleration", "NodeAffinity",
                                         "NodeResourcesFit"]


# --- NodeAffinity ---------------------------------------------------------------------------------

LABELS = {"zone": "a", "gpus": "4", "disk": "ssd", "version": "v2"}


def test_no_selector_or_affinity_matches_every_node():
    assert matches_selector_and_affinity({}, node()) is None
    assert matches_selector_and_affinity({"affinity": None, "nodeSelector": None}, node()) is None


@pytest.mark.parametrize(
    ("selector", "expected"),
    [({"zone": "a"}, None), ({"zone": "a", "disk": "ssd"}, None), ({"zone": "b"}, AFFINITY),
     ({"zone": "a", "rack": "1"}, AFFINITY)],
)
def test_node_selector_needs_every_label_equal(selector, expected):
    assert matches_selector_and_affinity({"nodeSelector": selector}, node(labels=LABELS)) == expected


@pytest.mark.parametrize(
    ("requirement", "matches"),
    [
        (expr("zone", "In", "a", "b"), True),
        (expr("zone", "In", "b", "c"), False),
        (expr("rack", "In", "1"), False),  # In needs the label
        (expr("zone", "NotIn", "b"), True),
        (expr("zone", "NotIn", "a"), False),
        (expr("rack", "NotIn", "1"), True),  # NotIn holds when the label is absent
        (expr("disk", "Exists"), True),
        (expr("rack", "Exists"), False),
        (expr("rack", "DoesNotExist"), True),
        (expr("disk", "DoesNotExist"), False),
        (expr("gpus", "Gt", "2"), True),
        (expr("gpus", "Gt", "4"), False),
        (expr("gpus", "Lt", "8"), True),
        (expr("gpus", "Lt", "4"), False),
        (expr("rack", "Gt", "0"), False),  # Gt/Lt need the label
        (expr("version", "Gt", "1"), False),  # ... with an integer value
        # Parse errors make the term match nothing.
        (expr("gpus", "Gt", "two"), False),
        (expr("gpus", "Gt", "1", "2"), False),
        (expr("gpus", "Gt"), False),
        (expr("zone", "In"), False),
        (expr("zone", "NotIn"), False),
        (expr("disk", "Exists", "ssd"), False),
        (expr("rack", "DoesNotExist", "x"), False),
        (expr("zone", "Equals", "a"), False),
    ],
)
def test_match_expression_operators(requirement, matches):
    pod = required({"matchExpressions": [requirement]})
    assert matches_selector_and_affinity(pod, node(labels=LABELS)) == (None if matches else AFFINITY)


def test_expressions_within_a_term_are_anded():
    both = required({"matchExpressions": [expr("zone", "In", "a"), expr("disk", "In", "ssd")]})
    one = required({"matchExpressions": [expr("zone", "In", "a"), expr("disk", "In", "hdd")]})
    assert matches_selector_and_affinity(both, node(labels=LABELS)) is None
    assert matches_selector_and_affinity(one, node(labels=LABELS)) == AFFINITY


def test_terms_are_ored():
    pod = required({"matchExpressions": [expr("zone", "In", "b")]}, {"matchExpressions": [expr("disk", "Exists")]})
    assert matches_selector_and_affinity(pod, node(labels=LABELS)) is None
    pod = required({"matchExpressions": [expr("zone", "In", "b")]}, {"matchExpressions": [expr("rack", "Exists")]})
    assert matches_selector_and_affinity(pod, node(labels=LABELS)) == AFFINITY


def test_an_invalid_term_does_not_spoil_a_matching_one():
    pod = required({"matchExpressions": [expr("gpus", "Gt", "x")]}, {"matchExpressions": [expr("zone", "In", "a")]})
    assert matches_selector_and_affinity(pod, node(labels=LABELS)) is None


def test_empty_terms_match_nothing():
    assert matches_selector_and_affinity(required({}), node(labels=LABELS)) == AFFINITY
    assert matches_selector_and_affinity(required({"matchExpressions": [], "matchFields": []}),
                                         node(labels=LABELS)) == AFFINITY
    assert matches_selector_and_affinity(required(), node(labels=LABELS)) == AFFINITY
    # ... but are skipped when another term matches.
    assert matches_selector_and_affinity(required({}, {"matchExpressions": [expr("zone", "In", "a")]}),
                                         node(labels=LABELS)) is None


def test_match_fields_metadata_name():
    pin = required({"matchFields": [expr("metadata.name", "In", "n2")]})
    avoid = required({"matchFields": [expr("metadata.name", "NotIn", "n2")]})
    assert matches_selector_and_affinity(pin, node("n2")) is None
    assert matches_selector_and_affinity(pin, node("n1")) == AFFINITY
    assert matches_selector_and_affinity(avoid, node("n2")) == AFFINITY
    assert matches_selector_and_affinity(avoid, node("n1")) is None


@pytest.mark.parametrize(
    "field",
    [expr("metadata.name", "In", "n1", "n2"), expr("metadata.name", "In"), expr("metadata.name", "Exists"),
     expr("metadata.name", "Gt", "1")],
)
def test_match_fields_allow_only_in_and_not_in_with_one_value(field):
    assert matches_selector_and_affinity(required({"matchFields": [field]}), node("n1")) == AFFINITY


def test_match_fields_and_expressions_in_one_term_are_anded():
    term = {"matchExpressions": [expr("zone", "In", "a")], "matchFields": [expr("metadata.name", "In", "n1")]}
    assert matches_selector_and_affinity(required(term), node("n1", labels=LABELS)) is None
    assert matches_selector_and_affinity(required(term), node("n1", labels={"zone": "b"})) == AFFINITY
    assert matches_selector_and_affinity(required(term), node("n2", labels=LABELS)) == AFFINITY


def test_a_pin_must_be_anded_into_each_existing_term_not_added_as_a_term():
    # Terms are ORed, so a pin added as its own term widens the choice (and the API rejects it on a
    # gated pod: KEP-3838 allows only additions of requirements to existing terms). ANDed into the
    # user's term, the pin narrows it to the planned node.
    user = {"matchExpressions": [expr("zone", "In", "a")]}
    pin = expr("metadata.name", "In", "n1")
    ored = required(user, {"matchFields": [pin]})
    anded = required({**user, "matchFields": [pin]})
    assert matches_selector_and_affinity(ored, node("n2", labels=LABELS)) is None
    assert matches_selector_and_affinity(ored, node("n1", labels={"zone": "b"})) is None
    assert matches_selector_and_affinity(anded, node("n1", labels=LABELS)) is None
    assert matches_selector_and_affinity(anded, node("n2", labels=LABELS)) == AFFINITY
    assert matches_selector_and_affinity(anded, node("n1", labels={"zone": "b"})) == AFFINITY


def test_node_selector_and_affinity_must_both_hold():
    pod = {"nodeSelector": {"disk": "ssd"}, **required({"matchExpressions": [expr("zone", "In", "a")]})}
    assert matches_selector_and_affinity(pod, node(labels=LABELS)) is None
    assert matches_selector_and_affinity(pod, node(labels={**LABELS, "disk": "hdd"})) == AFFINITY
    assert matches_selector_and_affinity(pod, node(labels={**LABELS, "zone": "b"})) == AFFINITY


def test_preferred_node_affinity_is_only_a_score():
    pod = {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [expr("zone", "In", "b")]}}]}}}
    assert matches_selector_and_affinity(pod, node(labels=LABELS)) is None


def test_expected_member_description_uses_its_selector_and_affinity():
    member = {"role": "worker", "count": 2, "requests": {"cpu": "1"}, "nodeSelector": {"disk": "ssd"},
              "tolerations": [], **required({"matchExpressions": [expr("zone", "In", "a")]})}
    assert matches_selector_and_affinity(member, node(labels=LABELS)) is None
    assert matches_selector_and_affinity(member, node(labels={"disk": "ssd"})) == AFFINITY


# --- NodeResourcesFit: resources the node doesn't offer --------------------------------------------------------------


def test_node_without_an_extended_resource_lacks_it():
    assert has_resources_kinds({"cpu": D(1), "nvidia.com/gpu": D(1)}, node()) == \
        "node(s) lack resource nvidia.com/gpu"


def test_node_with_the_extended_resource_has_it_even_if_all_is_in_use():
    gpu_node = node(allocatable={"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "1"})
    assert has_resources_kinds({"nvidia.com/gpu": D(4)}, gpu_node) is None  # amount is capacity's job


def test_zero_allocatable_is_lacking_and_zero_requests_need_nothing():
    zero = node(allocatable={"cpu": "8", "pods": "110", "nvidia.com/gpu": "0"})
    assert has_resources_kinds({"nvidia.com/gpu": D(1)}, zero) == "node(s) lack resource nvidia.com/gpu"
    assert has_resources_kinds({"nvidia.com/gpu": D(0), "cpu": D(1)}, node()) is None


def test_every_lacking_resource_is_listed_sorted():
    requests = {"example.com/fpga": D(1), "cpu": D(1), "hugepages-2Mi": D(2**21), "nvidia.com/gpu": D(2)}
    assert has_resources_kinds(requests, node()) == \
        "node(s) lack resource example.com/fpga, hugepages-2Mi, nvidia.com/gpu"


# --- NodePorts --------------------------------------------------------------------------------------


def container(*ports: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "c", "image": "x", "ports": list(ports), **extra}


def test_host_ports_default_ip_and_protocol():
    spec = {"containers": [container({"containerPort": 80, "hostPort": 8080}),
                           container({"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"})]}
    assert host_ports(spec) == {(ANY_HOST_IP, 8080, "TCP"), ("10.0.0.1", 53, "UDP")}


def test_container_ports_without_host_port_take_nothing():
    assert host_ports({"containers": [container({"containerPort": 80}, {"containerPort": 81, "hostPort": 0})]}) == \
        frozenset()


def test_sidecars_take_host_ports_and_ordinary_init_containers_do_not():
    spec = {"initContainers": [container({"containerPort": 1, "hostPort": 9001}),
                               container({"containerPort": 2, "hostPort": 9002}, restartPolicy="Always")],
            "containers": [container({"containerPort": 3, "hostPort": 9003})]}
    assert host_ports(spec) == {(ANY_HOST_IP, 9002, "TCP"), (ANY_HOST_IP, 9003, "TCP")}


def test_host_network_defaults_host_port_to_container_port():
    spec = {"hostNetwork": True, "containers": [container({"containerPort": 7077}, {"containerPort": 80,
                                                                                     "hostPort": 8080})]}
    assert host_ports(spec) == {(ANY_HOST_IP, 7077, "TCP"), (ANY_HOST_IP, 8080, "TCP")}


def test_expected_members_have_no_host_ports():
    assert host_ports({"role": "executor", "count": 2, "requests": {"cpu": "1"}}) == frozenset()


@pytest.mark.parametrize(
    ("wanted", "used", "conflict"),
    [
        ((ANY_HOST_IP, 8080, "TCP"), (ANY_HOST_IP, 8080, "TCP"), True),
        ((ANY_HOST_IP, 8080, "TCP"), (ANY_HOST_IP, 8080, "UDP"), False),  # protocols are separate
        ((ANY_HOST_IP, 8080, "TCP"), (ANY_HOST_IP, 8081, "TCP"), False),
        (("10.0.0.1", 8080, "TCP"), (ANY_HOST_IP, 8080, "TCP"), True),  # 0.0.0.0 in use binds every IP
        ((ANY_HOST_IP, 8080, "TCP"), ("10.0.0.1", 8080, "TCP"), True),  # 0.0.0.0 wanted needs every IP
        (("10.0.0.1", 8080, "TCP"), ("10.0.0.1", 8080, "TCP"), True),
        (("10.0.0.1", 8080, "TCP"), ("10.0.0.2", 8080, "TCP"), False),  # different addresses coexist
    ],
)
def test_host_port_conflict_rules(wanted, used, conflict):
    assert host_port_conflict([wanted], [used]) == (wanted if conflict else None)


def test_host_port_conflict_between_two_pods_names_the_port():
    running = host_ports({"containers": [container({"containerPort": 1, "hostPort": 7000},
                                                   {"containerPort": 2, "hostPort": 7001, "protocol": "UDP"})]})
    member = host_ports({"containers": [container({"containerPort": 3, "hostPort": 7001, "protocol": "UDP"},
                                                  {"containerPort": 4, "hostPort": 7002})]})
    assert host_port_conflict(member, running) == (ANY_HOST_IP, 7001, "UDP")
    assert host_port_conflict(member, []) is None
    assert host_port_conflict([], running) is None


# --- certifiability -----------------------------------------------------------------------------------

GANG_LABELS = {keys.POD_GROUP_LABEL: "spark-pi", "spark-role": "executor"}


def anti_affinity(term: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}


ONE_PER_NODE = {"labelSelector": {"matchLabels": {keys.POD_GROUP_LABEL: "spark-pi"}},
                "topologyKey": "kubernetes.io/hostname"}


def test_plain_pod_is_certifiable():
    assert certifiability({"containers": [container()], "volumes": [{"name": "cfg", "configMap": {"name": "c"}}]},
                          labels=GANG_LABELS) is None


def test_required_pod_affinity_is_not_certifiable():
    spec = {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}]}}}
    assert certifiability(spec, labels=GANG_LABELS) == "required pod affinity"


def test_preferred_pod_affinity_and_anti_affinity_are_only_scores():
    preferred = [{"weight": 1, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "x"}},
                                                    "topologyKey": "kubernetes.io/hostname"}}]
    spec = {"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred},
                         "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}}
    assert certifiability(spec, labels=GANG_LABELS) is None


@pytest.mark.parametrize(
    "term",
    [
        ONE_PER_NODE,
        {"labelSelector": {"matchExpressions": [expr(keys.POD_GROUP_LABEL, "In", "spark-pi")]},
         "topologyKey": "kubernetes.io/hostname"},
        # matchLabelKeys merges "key In (own value)" into the selector.
        {"labelSelector": {"matchExpressions": [expr(keys.POD_GROUP_LABEL, "Exists")]},
         "matchLabelKeys": [keys.POD_GROUP_LABEL], "topologyKey": "kubernetes.io/hostname"},
    ],
)
def test_one_member_per_node_anti_affinity_on_the_gang_label_is_certifiable(term):
    assert certifiability(anti_affinity(term), labels=GANG_LABELS) is None


@pytest.mark.parametrize(
    ("term", "labels"),
    [
        ({**ONE_PER_NODE, "topologyKey": "topology.kubernetes.io/zone"}, GANG_LABELS),
        ({**ONE_PER_NODE, "labelSelector": {"matchLabels": {keys.POD_GROUP_LABEL: "other"}}}, GANG_LABELS),
        ({**ONE_PER_NODE, "labelSelector": {"matchLabels": {keys.POD_GROUP_LABEL: "spark-pi",
                                                            "spark-role": "executor"}}}, GANG_LABELS),
        ({**ONE_PER_NODE, "labelSelector": {"matchLabels": {"spark-role": "executor"}}}, GANG_LABELS),
        ({**ONE_PER_NODE, "labelSelector": {"matchExpressions": [expr(keys.POD_GROUP_LABEL, "Exists")]}},
         GANG_LABELS),
        ({**ONE_PER_NODE, "labelSelector": {"matchExpressions": [expr(keys.POD_GROUP_LABEL, "In", "spark-pi",
                                                                      "other")]}}, GANG_LABELS),
        ({**ONE_PER_NODE, "labelSelector": None}, GANG_LABELS),
        ({**ONE_PER_NODE, "namespaceSelector": {}}, GANG_LABELS),  # {} selects every namespace
        ({**ONE_PER_NODE, "namespaces": ["other"]}, GANG_LABELS),
        ({**ONE_PER_NODE, "mismatchLabelKeys": ["spark-role"]}, GANG_LABELS),
        (ONE_PER_NODE, None),  # own gang can't be verified without the labels
        (ONE_PER_NODE, {"app": "x"}),
    ],
)
def test_other_required_anti_affinity_is_not_certifiable(term, labels):
    assert certifiability(anti_affinity(term), labels=labels) == \
        "required pod anti-affinity other than one gang member per node"


def test_topology_spread_do_not_schedule_is_not_certifiable_schedule_anyway_is():
    def spread(when):
        return {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": when,
                                               "labelSelector": {"matchLabels": {"app": "x"}}}]}
    assert certifiability(spread("DoNotSchedule")) == "topology spread constraints"
    assert certifiability(spread("ScheduleAnyway")) is None


def test_dynamic_resource_claims_are_not_certifiable():
    spec = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}
    assert certifiability(spec) == "dynamic resource claims"


def test_volume_claims_are_unbound_unless_the_lister_says_bound():
    spec = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
                        {"name": "logs", "persistentVolumeClaim": {"claimName": "logs-0"}}]}
    assert certifiability(spec) == "unbound volume claims (data-0, logs-0)"
    assert certifiability(spec, bound_claims=lambda name: True) is None
    assert certifiability(spec, bound_claims=lambda name: name == "data-0") == "unbound volume claims (logs-0)"


def test_generic_ephemeral_volume_claim_is_named_after_pod_and_volume():
    spec = {"volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]}
    asked: list[str] = []

    def bound(name: str) -> bool:
        asked.append(name)
        return True

    assert certifiability(spec, bound_claims=bound, pod_name="job-0") is None
    assert asked == ["job-0-scratch"]
    assert certifiability(spec, bound_claims=bound) == "unbound volume claims (scratch (ephemeral))"


def test_every_reason_is_reported():
    spec = {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}],
            "resourceClaims": [{"name": "gpu"}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "d"}}]}
    assert certifiability(spec) == "topology spread constraints; dynamic resource claims; unbound volume claims (d)"


# --- feasible: every filter ------------------------------------------------------------------------------------------


def test_feasible_nodes_runs_every_filter():
    gpu = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "8"}
    nodes = [
        node("good", labels={"pool": "gpu"}, allocatable=gpu),
        node("cordoned", labels={"pool": "gpu"}, allocatable=gpu, unschedulable=True),
        node("down", labels={"pool": "gpu"}, allocatable=gpu, ready="False"),
        node("tainted", labels={"pool": "gpu"}, allocatable=gpu, taints=[{"key": "team", "value": "a",
                                                                            "effect": "NoSchedule"}]),
        node("cpu-pool", labels={"pool": "cpu"}, allocatable=gpu),
        node("no-gpu", labels={"pool": "gpu"}),
        node("gpu-tainted", labels={"pool": "gpu"}, allocatable=gpu, taints=[GPU]),
    ]
    spec = {"nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "containers": [{"name": "train", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    names, reasons = feasible_nodes(spec, nodes)
    assert names == ["good", "gpu-tainted"]
    assert reasons == {
        "cordoned": "node(s) were unschedulable",
        "down": "node(s) were not ready",
        "tainted": "node(s) had untolerated taint {team=a:NoSchedule}",
        "cpu-pool": AFFINITY,
        "no-gpu": "node(s) lack resource nvidia.com/gpu",
    }


def test_feasible_nodes_counts_init_container_resources_through_pod_requests():
    # An init container needing an FPGA makes the pod need one: max(init, app) per resource.
    spec = {"initContainers": [{"name": "probe", "resources": {"requests": {"example.com/fpga": "1"}}}],
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]}
    fpga = node("fpga", allocatable={"cpu": "8", "pods": "110", "example.com/fpga": "1"})
    assert feasible_nodes(spec, [node("plain"), fpga]) == \
        (["fpga"], {"plain": "node(s) lack resource example.com/fpga"})


def test_feasible_nodes_for_an_expected_member_uses_its_requests_and_pins():
    member = {"role": "executor", "count": 4, "requests": {"cpu": "2", "nvidia.com/gpu": "1"},
              "nodeSelector": {}, "tolerations": [],
              **required({"matchFields": [expr("metadata.name", "NotIn", "b")]})}
    gpu = {"cpu": "8", "pods": "110", "nvidia.com/gpu": "1"}
    names, reasons = feasible_nodes(member, [node("a", allocatable=gpu), node("b", allocatable=gpu), node("c")])
    assert names == ["a"]
    assert reasons == {"b": AFFINITY, "c": "node(s) lack resource nvidia.com/gpu"}


def test_feasible_nodes_of_nothing():
    assert feasible_nodes({}, []) == ([], {})


def test_feasible_nodes_agrees_with_each_filter_on_its_own():
    """feasible and unfit run the registered filters; the answers must be those of each filter on its own, in the
    scheduler's order, over nodes that differ in every way the filters read."""
    rng = random.Random(11)
    taints = [[], [GPU], [{"key": "team", "value": "a", "effect": "NoSchedule"}],
              [{"key": "team", "value": "b", "effect": "NoExecute"}, GPU]]
    nodes = [node(f"n{i:02d}", labels={k: v for k, v in (("pool", rng.choice(["a", "b", None])),
                                                          ("zone", rng.choice(["1", "2", None])),
                                                          ("size", rng.choice(["3", "12", None]))) if v},
                  taints=rng.choice(taints), unschedulable=rng.random() < 0.2,
                  ready=rng.choice(["True", "True", "False", "Unknown", None]),
                  allocatable=rng.choice([None, {"cpu": "8", "pods": "110", "nvidia.com/gpu": "2"}]))
             for i in range(60)]
    specs = [
        {},
        {"nodeSelector": {"pool": "a"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]},
        {"tolerations": [{"operator": "Exists"}], **required({"matchExpressions": [expr("size", "Gt", "5")]},
                                                           {"matchExpressions": [expr("zone", "DoesNotExist")]})},
        {**required({"matchExpressions": [expr("pool", "In", "b")], "matchFields": [expr("metadata.name", "NotIn",
                                                                                           "n03")]}),
         "tolerations": [{"key": "team", "operator": "Equal", "value": "a"}],
         "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        {"tolerations": [{"operator": "Exists"}], **required({"matchFields": [expr("metadata.name", "In", "n05")]})},
        {"tolerations": [{"key": TAINT_UNSCHEDULABLE, "operator": "Exists"},
                         {"key": TAINT_NOT_READY, "operator": "Exists", "effect": "NoSchedule"}]},
    ]
    for spec in specs:
        requests = requests_of(spec)
        in_order = (NodeUnschedulable(), NodeReadiness(), TaintToleration(), NodeAffinity(), NodeResourcesFit())
        expected = {n["metadata"]["name"]: next((reason for plugin in in_order
                                                 if (reason := check(plugin, spec, n, requests)) is not None), None)
                    for n in nodes}
        names, reasons = feasible_nodes(spec, nodes)
        assert names == [name for name, reason in expected.items() if reason is None], spec
        assert reasons == {name: reason for name, reason in expected.items() if reason is not None}, spec
