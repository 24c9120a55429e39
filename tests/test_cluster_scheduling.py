"""The emulator's scheduler against kube-scheduler's documented Filter/Score rules; expected values worked by hand."""

from __future__ import annotations

from typing import Any

import pytest

from cluster.scheduling import (
    REASON_AFFINITY_PREFILTER,
    REASON_NODE_AFFINITY,
    REASON_NODE_NAME,
    REASON_NODE_PORTS,
    REASON_UNSCHEDULABLE,
    NodeUsage,
    affinity_node_names,
    filter_node,
    fits_resources,
    host_ports_free,
    least_allocated_score,
    matches_node_selector_and_affinity,
    node_name_matches,
    node_schedulable,
    node_usage,
    non_zero_requests,
    occupies_node,
    schedule,
    tolerates_taints,
    unschedulable_message,
)

pytestmark = pytest.mark.unit

Gi = 1024**3
Mi = 1024**2


def make_node(
    name: str = "a",
    cpu: str | None = "4",
    memory: str | None = "8Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    unschedulable: bool = False,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    allocatable = {"pods": pods, **(extra or {})}
    if cpu is not None:
        allocatable["cpu"] = cpu
    if memory is not None:
        allocatable["memory"] = memory
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"allocatable": allocatable},
    }


def container(cpu: str | None = None, memory: str | None = None, **fields: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": "c", "resources": {"requests": requests}, **fields}


def make_pod(cpu: str | None = None, memory: str | None = None, node: str | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": [container(cpu, memory)], **spec}
    if node:
        body["nodeName"] = node
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": body, "status": {"phase": "Pending"}}


def pinned(pod: dict[str, Any], node_name: str) -> dict[str, Any]:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
    required = {"nodeSelectorTerms": [term]}
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    return pod


def bind(pod: dict[str, Any], node_name: str) -> dict[str, Any]:
    return {**pod, "spec": {**pod["spec"], "nodeName": node_name}, "status": {"phase": "Running"}}


def usage(cpu_milli: int = 0, memory: int = 0, pods: int = 0, scalars: dict[str, int] | None = None) -> NodeUsage:
    requested = {"cpu": cpu_milli, "memory": memory, **(scalars or {})}
    return NodeUsage(requested=requested, non_zero_cpu=cpu_milli, non_zero_memory=memory, pod_count=pods)


# --- NodeResourcesFit -------------------------------------------------------------------------------


class TestFitsResources:
    def test_fits_exactly_at_the_boundary(self) -> None:
        assert fits_resources(make_pod("500m"), make_node(cpu="2"), usage(1500, pods=1)) is None

    def test_one_millicore_over_is_insufficient(self) -> None:
        assert fits_resources(make_pod("501m"), make_node(cpu="2"), usage(1500, pods=1)) == "Insufficient cpu"

    def test_memory(self) -> None:
        assert fits_resources(make_pod(memory="5Gi"), make_node(memory="8Gi"), usage(memory=4 * Gi)) == (
            "Insufficient memory"
        )

    def test_every_failing_resource_is_reported_in_kube_scheduler_order(self) -> None:
        pod = make_pod("5", "9Gi")
        pod["spec"]["containers"][0]["resources"]["requests"].update(
            {"nvidia.com/gpu": "1", "example.com/foo": "1", "ephemeral-storage": "1Gi"}
        )
        node = make_node(cpu="4", memory="8Gi", pods="1", extra={"ephemeral-storage": "512Mi"})
        assert fits_resources(pod, node, usage(pods=1)) == (
            "Too many pods, Insufficient cpu, Insufficient memory, Insufficient ephemeral-storage, "
            "Insufficient example.com/foo, Insufficient nvidia.com/gpu"
        )

    def test_init_container_peak_counts(self) -> None:
        pod = make_pod("1", initContainers=[container("3")])
        assert fits_resources(pod, make_node(cpu="2"), usage()) == "Insufficient cpu"
        assert fits_resources(pod, make_node(cpu="3"), usage()) is None

    def test_sidecar_adds_to_app_containers(self) -> None:
        pod = make_pod("1", initContainers=[container("1", restartPolicy="Always")])
        assert fits_resources(pod, make_node(cpu="1500m"), usage()) == "Insufficient cpu"
        assert fits_resources(pod, make_node(cpu="2"), usage()) is None

    def test_overhead_counts(self) -> None:
        pod = make_pod("1", overhead={"cpu": "250m"})
        assert fits_resources(pod, make_node(cpu="1200m"), usage()) == "Insufficient cpu"
        assert fits_resources(pod, make_node(cpu="1250m"), usage()) is None

    def test_limit_without_request_is_the_request(self) -> None:
        pod = make_pod()
        pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "3"}}
        assert fits_resources(pod, make_node(cpu="2"), usage()) == "Insufficient cpu"

    def test_extended_resource_short(self) -> None:
        pod = make_pod()
        pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
        assert fits_resources(pod, make_node(extra={"nvidia.com/gpu": "1"}), usage()) == "Insufficient nvidia.com/gpu"

    def test_extended_resource_already_taken(self) -> None:
        pod = make_pod()
        pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
        node = make_node(extra={"nvidia.com/gpu": "1"})
        assert fits_resources(pod, node, usage()) is None
        assert fits_resources(pod, node, usage(scalars={"nvidia.com/gpu": 1})) == "Insufficient nvidia.com/gpu"

    def test_extended_resource_the_node_lacks(self) -> None:
        pod = make_pod()
        pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
        assert fits_resources(pod, make_node(), usage()) == "Insufficient nvidia.com/gpu"

    def test_unprefixed_unknown_resource_is_not_checked(self) -> None:
        pod = make_pod()
        pod["spec"]["containers"][0]["resources"]["requests"]["widgets"] = "5"
        assert fits_resources(pod, make_node(), usage()) is None

    def test_pod_count_limit_applies_even_without_requests(self) -> None:
        assert fits_resources(make_pod(), make_node(pods="2"), usage(pods=2)) == "Too many pods"
        assert fits_resources(make_pod(), make_node(pods="2"), usage(pods=1)) is None

    def test_a_node_without_a_pods_allocatable_takes_no_pods(self) -> None:
        node = make_node()
        del node["status"]["allocatable"]["pods"]
        assert fits_resources(make_pod(), node, usage()) == "Too many pods"

    def test_zero_request_pod_fits_an_overcommitted_node(self) -> None:
        assert fits_resources(make_pod(), make_node(cpu="1"), usage(5000, pods=3)) is None

    def test_node_usage_sums_requests_and_counts_pods(self) -> None:
        on_node = [make_pod("1", "1Gi"), make_pod("250m"), make_pod()]
        used = node_usage(on_node)
        assert used.requested == {"cpu": 1250, "memory": Gi}
        assert (used.non_zero_cpu, used.non_zero_memory, used.pod_count) == (1350, Gi + 400 * Mi, 3)

    def test_quantities_round_up_like_milli_value(self) -> None:
        assert node_usage([make_pod("0.0001")]).requested == {"cpu": 1}


# --- TaintToleration --------------------------------------------------------------------------------


def tainted(*taints: dict[str, Any]) -> dict[str, Any]:
    return make_node(taints=list(taints))


GPU_NO_SCHEDULE = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


class TestTaints:
    def test_untainted_node(self) -> None:
        assert tolerates_taints(make_pod(), make_node()) is None

    def test_untolerated_no_schedule(self) -> None:
        reason = tolerates_taints(make_pod(), tainted(GPU_NO_SCHEDULE))
        assert reason == "node(s) had untolerated taint {dedicated: gpu}"

    def test_untolerated_no_execute(self) -> None:
        taint = {"key": "k", "value": "v", "effect": "NoExecute"}
        assert tolerates_taints(make_pod(), tainted(taint)) == "node(s) had untolerated taint {k: v}"

    def test_prefer_no_schedule_does_not_filter(self) -> None:
        assert tolerates_taints(make_pod(), tainted({"key": "k", "value": "v", "effect": "PreferNoSchedule"})) is None

    def test_empty_value_is_printed_empty(self) -> None:
        taint = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
        assert tolerates_taints(make_pod(), tainted(taint)) == (
            "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }"
        )

    def test_first_untolerated_taint_is_reported(self) -> None:
        node = tainted(
            {"key": "soft", "effect": "PreferNoSchedule"},
            {"key": "ok", "value": "1", "effect": "NoSchedule"},
            {"key": "first", "value": "2", "effect": "NoExecute"},
            {"key": "second", "value": "3", "effect": "NoSchedule"},
        )
        pod = make_pod(tolerations=[{"key": "ok", "operator": "Exists"}])
        assert tolerates_taints(pod, node) == "node(s) had untolerated taint {first: 2}"

    @pytest.mark.parametrize(
        ("toleration", "tolerated"),
        [
            ({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}, True),
            ({"key": "dedicated", "value": "gpu"}, True),  # operator defaults to Equal, empty effect matches all
            ({"key": "dedicated", "operator": "Equal", "value": "cpu"}, False),
            ({"key": "dedicated", "operator": "Equal"}, False),  # value "" != "gpu"
            ({"key": "dedicated", "operator": "Exists"}, True),
            ({"key": "other", "operator": "Exists"}, False),
            ({"operator": "Exists"}, True),  # empty key with Exists tolerates everything
            ({"operator": "Exists", "effect": "NoExecute"}, False),  # ...but not another effect
            ({"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}, True),
            ({"key": "dedicated", "operator": "Exists", "effect": "PreferNoSchedule"}, False),
            ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}, False),
            ({"key": "dedicated", "operator": "Gt", "value": "1"}, False),  # alpha comparison operators are off
        ],
    )
    def test_toleration_matching(self, toleration: dict[str, Any], tolerated: bool) -> None:
        reason = tolerates_taints(make_pod(tolerations=[toleration]), tainted(GPU_NO_SCHEDULE))
        assert (reason is None) is tolerated

    def test_toleration_seconds_do_not_matter_for_scheduling(self) -> None:
        taint = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}
        toleration = {
            "key": "node.kubernetes.io/not-ready",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 0,
        }
        assert tolerates_taints(make_pod(tolerations=[toleration]), tainted(taint)) is None

    def test_every_filtering_taint_must_be_tolerated(self) -> None:
        node = tainted(GPU_NO_SCHEDULE, {"key": "zone", "value": "a", "effect": "NoExecute"})
        one = make_pod(tolerations=[{"key": "dedicated", "operator": "Exists"}])
        both = make_pod(tolerations=[{"key": "dedicated", "operator": "Exists"}, {"key": "zone", "value": "a"}])
        assert tolerates_taints(one, node) == "node(s) had untolerated taint {zone: a}"
        assert tolerates_taints(both, node) is None


# --- NodeUnschedulable and NodeName -----------------------------------------------------------------


class TestNodeUnschedulable:
    def test_schedulable_node(self) -> None:
        assert node_schedulable(make_pod(), make_node()) is None

    def test_cordoned_node(self) -> None:
        assert node_schedulable(make_pod(), make_node(unschedulable=True)) == REASON_UNSCHEDULABLE

    @pytest.mark.parametrize(
        "toleration",
        [
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
            {"operator": "Exists"},
        ],
    )
    def test_tolerating_the_unschedulable_taint(self, toleration: dict[str, Any]) -> None:
        assert node_schedulable(make_pod(tolerations=[toleration]), make_node(unschedulable=True)) is None

    def test_toleration_for_another_effect_does_not_help(self) -> None:
        toleration = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}
        assert node_schedulable(make_pod(tolerations=[toleration]), make_node(unschedulable=True)) == (
            REASON_UNSCHEDULABLE
        )


class TestNodeName:
    def test_unset_matches_any(self) -> None:
        assert node_name_matches(make_pod(), make_node("a")) is None

    def test_matching_and_not(self) -> None:
        assert node_name_matches(make_pod(node="a"), make_node("a")) is None
        assert node_name_matches(make_pod(node="b"), make_node("a")) == REASON_NODE_NAME


# --- NodeAffinity -----------------------------------------------------------------------------------

LABELS = {"zone": "a", "gpus": "4", "tier": "gold"}


def with_terms(*terms: dict[str, Any], **spec: Any) -> dict[str, Any]:
    required = {"nodeSelectorTerms": list(terms)}
    return make_pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}, **spec)


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


class TestNodeAffinity:
    @pytest.mark.parametrize(
        ("requirement", "matches"),
        [
            (expr("zone", "In", "a", "b"), True),
            (expr("zone", "In", "b"), False),
            (expr("missing", "In", "a"), False),
            (expr("zone", "In"), False),  # In needs values
            (expr("zone", "NotIn", "b"), True),
            (expr("zone", "NotIn", "a"), False),
            (expr("missing", "NotIn", "a"), True),  # absent label is "not in"
            (expr("zone", "Exists"), True),
            (expr("missing", "Exists"), False),
            (expr("zone", "Exists", "a"), False),  # Exists takes no values
            (expr("missing", "DoesNotExist"), True),
            (expr("zone", "DoesNotExist"), False),
            (expr("gpus", "Gt", "3"), True),
            (expr("gpus", "Gt", "4"), False),
            (expr("gpus", "Lt", "5"), True),
            (expr("gpus", "Lt", "4"), False),
            (expr("gpus", "Gt", "-1"), True),
            (expr("tier", "Gt", "1"), False),  # label is not an integer
            (expr("missing", "Lt", "10"), False),
            (expr("gpus", "Gt", "1", "2"), False),  # exactly one value
            (expr("gpus", "Gt", "x"), False),
            (expr("zone", "Like", "a"), False),
        ],
    )
    def test_match_expressions(self, requirement: dict[str, Any], matches: bool) -> None:
        pod = with_terms({"matchExpressions": [requirement]})
        reason = matches_node_selector_and_affinity(pod, make_node(labels=LABELS))
        assert reason == (None if matches else REASON_NODE_AFFINITY)

    def test_expressions_in_a_term_are_anded(self) -> None:
        term = {"matchExpressions": [expr("zone", "In", "a"), expr("gpus", "Gt", "8")]}
        assert matches_node_selector_and_affinity(with_terms(term), make_node(labels=LABELS)) == REASON_NODE_AFFINITY

    def test_terms_are_ored_and_a_malformed_term_does_not_spoil_the_others(self) -> None:
        bad = {"matchExpressions": [expr("zone", "In")]}
        good = {"matchExpressions": [expr("tier", "In", "gold")]}
        assert matches_node_selector_and_affinity(with_terms(bad, good), make_node(labels=LABELS)) is None

    def test_empty_term_matches_nothing(self) -> None:
        assert matches_node_selector_and_affinity(with_terms({}), make_node(labels=LABELS)) == REASON_NODE_AFFINITY

    def test_required_affinity_without_terms_matches_nothing(self) -> None:
        assert matches_node_selector_and_affinity(with_terms(), make_node(labels=LABELS)) == REASON_NODE_AFFINITY

    @pytest.mark.parametrize(
        ("field", "node_name", "matches"),
        [
            (expr("metadata.name", "In", "a"), "a", True),
            (expr("metadata.name", "In", "a"), "b", False),
            (expr("metadata.name", "NotIn", "a"), "b", True),
            (expr("metadata.name", "NotIn", "a"), "a", False),
            (expr("metadata.name", "In", "a", "b"), "a", False),  # field selectors take exactly one value
            (expr("metadata.name", "Exists"), "a", False),
        ],
    )
    def test_match_fields(self, field: dict[str, Any], node_name: str, matches: bool) -> None:
        reason = matches_node_selector_and_affinity(with_terms({"matchFields": [field]}), make_node(node_name))
        assert reason == (None if matches else REASON_NODE_AFFINITY)

    def test_node_selector(self) -> None:
        node = make_node(labels=LABELS)
        assert matches_node_selector_and_affinity(make_pod(nodeSelector={"zone": "a", "tier": "gold"}), node) is None
        assert matches_node_selector_and_affinity(make_pod(nodeSelector={"zone": "b"}), node) == REASON_NODE_AFFINITY
        assert matches_node_selector_and_affinity(make_pod(nodeSelector={"disk": ""}), node) == REASON_NODE_AFFINITY

    def test_node_selector_and_affinity_must_both_hold(self) -> None:
        term = {"matchExpressions": [expr("zone", "In", "a")]}
        node = make_node(labels=LABELS)
        assert matches_node_selector_and_affinity(with_terms(term, nodeSelector={"tier": "gold"}), node) is None
        assert matches_node_selector_and_affinity(with_terms(term, nodeSelector={"tier": "lead"}), node) == (
            REASON_NODE_AFFINITY
        )

    def test_prefilter_node_names(self) -> None:
        assert affinity_node_names(make_pod()) is None
        assert affinity_node_names(pinned(make_pod(), "a")) == {"a"}
        in_a = {"matchFields": [expr("metadata.name", "In", "a")]}
        in_b = {"matchFields": [expr("metadata.name", "In", "b")]}
        labelled = {"matchExpressions": [expr("zone", "In", "a")]}
        assert affinity_node_names(with_terms(in_a, in_b)) == {"a", "b"}
        assert affinity_node_names(with_terms(in_a, labelled)) is None


# --- NodePorts --------------------------------------------------------------------------------------


def with_port(
    host_port: int, host_ip: str | None = None, protocol: str | None = None, sidecar: bool = False
) -> dict[str, Any]:
    port: dict[str, Any] = {"containerPort": 8080, "hostPort": host_port}
    if host_ip:
        port["hostIP"] = host_ip
    if protocol:
        port["protocol"] = protocol
    if sidecar:
        return make_pod(initContainers=[container(ports=[port], restartPolicy="Always")])
    return make_pod(containers=[container(ports=[port])])


class TestHostPorts:
    @pytest.mark.parametrize(
        ("existing", "wanted", "free"),
        [
            (with_port(80), with_port(80), False),
            (with_port(80), with_port(80, protocol="TCP"), False),  # TCP is the default protocol
            (with_port(80), with_port(81), True),
            (with_port(80), with_port(80, protocol="UDP"), True),
            (with_port(80, "10.0.0.1"), with_port(80, "10.0.0.2"), True),
            (with_port(80, "10.0.0.1"), with_port(80, "10.0.0.1"), False),
            (with_port(80, "10.0.0.1"), with_port(80), False),  # 0.0.0.0 collides with every IP
            (with_port(80), with_port(80, "10.0.0.2"), False),
            (with_port(80, sidecar=True), with_port(80), False),  # sidecars hold their ports
            (with_port(80), with_port(80, sidecar=True), False),
        ],
    )
    def test_conflicts(self, existing: dict[str, Any], wanted: dict[str, Any], free: bool) -> None:
        assert host_ports_free(wanted, make_node(), [existing]) == (None if free else REASON_NODE_PORTS)

    def test_plain_init_container_ports_are_released(self) -> None:
        existing = make_pod(initContainers=[container(ports=[{"containerPort": 1, "hostPort": 80}])])
        assert host_ports_free(with_port(80), make_node(), [existing]) is None

    def test_container_ports_without_host_port_never_conflict(self) -> None:
        no_host = make_pod(containers=[container(ports=[{"containerPort": 80}])])
        assert host_ports_free(no_host, make_node(), [no_host]) is None


# --- LeastAllocated ---------------------------------------------------------------------------------


class TestLeastAllocated:
    def test_half_used_node(self) -> None:
        # cpu (4000-2000)*100/4000 = 50, memory (8Gi-4Gi)*100/8Gi = 50 -> 50
        assert least_allocated_score(make_pod("1", "2Gi"), make_node(), usage(1000, 2 * Gi)) == 50

    def test_integer_division_at_every_step(self) -> None:
        # cpu (4000-1500)*100//4000 = 62, memory (8-1)*100//8 = 87 -> (62+87)//2 = 74
        assert least_allocated_score(make_pod("500m", "1Gi"), make_node(), usage(1000)) == 74

    def test_pod_without_requests_scores_with_defaults(self) -> None:
        # cpu 100m: 900*100//1000 = 90, memory 200Mi: 824*100//1024 = 80 -> 85
        assert least_allocated_score(make_pod(), make_node(cpu="1", memory="1Gi"), usage()) == 85

    def test_defaults_apply_per_container(self) -> None:
        pod = make_pod(containers=[container(), container()])
        assert non_zero_requests(pod) == (200, 400 * Mi)
        # cpu 800*100//1000 = 80, memory 624*100//1024 = 60 -> 70
        assert least_allocated_score(pod, make_node(cpu="1", memory="1Gi"), usage()) == 70

    def test_explicit_zero_is_not_defaulted(self) -> None:
        # cpu stays 0 -> 100, memory 512Mi of 1Gi -> 50 -> 75
        assert least_allocated_score(make_pod("0", "512Mi"), make_node(cpu="1", memory="1Gi"), usage()) == 75

    def test_over_requested_resource_scores_zero(self) -> None:
        # cpu 2000+100 > 1000 -> 0, memory 512Mi of 1Gi -> 50 -> 25
        assert least_allocated_score(make_pod(memory="512Mi"), make_node(cpu="1", memory="1Gi"), usage(2000)) == 25

    def test_resource_missing_on_node_is_left_out(self) -> None:
        assert least_allocated_score(make_pod("1"), make_node(memory=None), usage()) == 75

    def test_existing_pods_count_with_their_defaults(self) -> None:
        used = node_usage([make_pod(), make_pod()])  # 200m, 400Mi once defaulted
        # cpu (1000-300)*100//1000 = 70, memory (1024-600)*100//1024 = 41 -> 55
        assert least_allocated_score(make_pod(), make_node(cpu="1", memory="1Gi"), used) == 55


# --- schedule ---------------------------------------------------------------------------------------


class TestSchedule:
    def test_picks_the_emptier_node(self) -> None:
        nodes = [make_node("a"), make_node("b")]
        pods = [bind(make_pod("3"), "a"), bind(make_pod("1"), "b")]
        assert schedule(make_pod("1"), nodes, pods) == ("b", {})

    def test_ties_go_to_the_first_node_name(self) -> None:
        assert schedule(make_pod("1"), [make_node("b"), make_node("a")], []) == ("a", {})

    def test_terminal_and_unbound_pods_take_no_room(self) -> None:
        done = [{**bind(make_pod("4"), "a"), "status": {"phase": phase}} for phase in ("Succeeded", "Failed")]
        pending = make_pod("4")
        assert not any(occupies_node(p) for p in [*done, pending])
        assert schedule(make_pod("4"), [make_node("a")], [*done, pending]) == ("a", {})

    def test_terminating_pods_still_take_room(self) -> None:
        leaving = bind(make_pod("4"), "a")
        leaving["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
        assert schedule(make_pod("1"), [make_node("a")], [leaving]) == (None, {"a": "Insufficient cpu"})

    def test_filters_stop_at_the_first_failure(self) -> None:
        node = make_node("a", cpu="1", unschedulable=True, taints=[GPU_NO_SCHEDULE])
        assert filter_node(make_pod("2"), node, []) == REASON_UNSCHEDULABLE
        node["spec"]["unschedulable"] = False
        assert filter_node(make_pod("2"), node, []) == "node(s) had untolerated taint {dedicated: gpu}"

    def test_reasons_when_nothing_fits(self) -> None:
        nodes = [make_node("a", cpu="1"), make_node("b", cpu="1"), make_node("c", cpu="8", unschedulable=True)]
        name, reasons = schedule(make_pod("2"), nodes, [])
        assert name is None
        assert reasons == {"a": "Insufficient cpu", "b": "Insufficient cpu", "c": REASON_UNSCHEDULABLE}
        assert unschedulable_message(reasons, 3) == (
            "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu."
        )

    def test_the_2_2_4_trap(self) -> None:
        """LeastAllocated spreads the two 2-cpu pods, so the 4-cpu pod fits nowhere: a lucky gang would break."""
        nodes, placed = [make_node("a"), make_node("b")], []
        first = schedule(make_pod("2"), nodes, placed)
        assert first == ("a", {})  # both score (50+97)//2 = 73; tie -> "a"
        placed.append(bind(make_pod("2"), "a"))
        # a: cpu 0, memory (8192-400)*100//8192 = 95 -> 47;  b: still 73
        assert least_allocated_score(make_pod("2"), nodes[0], node_usage(placed)) == 47
        assert schedule(make_pod("2"), nodes, placed) == ("b", {})
        placed.append(bind(make_pod("2"), "b"))
        name, reasons = schedule(make_pod("4"), nodes, placed)
        assert name is None
        assert unschedulable_message(reasons, len(nodes)) == "0/2 nodes are available: 2 Insufficient cpu."

    def test_pinning_with_match_fields_avoids_the_trap(self) -> None:
        nodes, placed = [make_node("a"), make_node("b")], []
        for cpu, target in (("2", "a"), ("2", "a"), ("4", "b")):
            name, reasons = schedule(pinned(make_pod(cpu), target), nodes, placed)
            assert (name, reasons) == (target, {})
            placed.append(bind(make_pod(cpu), name))

    def test_nodes_outside_a_name_pin_get_the_prefilter_reason(self) -> None:
        nodes = [make_node("a", cpu="1"), make_node("b")]
        name, reasons = schedule(pinned(make_pod("2"), "a"), nodes, [])
        assert (name, reasons) == (None, {"a": "Insufficient cpu", "b": REASON_AFFINITY_PREFILTER})
        assert unschedulable_message(reasons, 2) == (
            "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't satisfy plugin(s) [NodeAffinity]."
        )

    def test_no_nodes(self) -> None:
        assert schedule(make_pod(), [], []) == (None, {})
        assert unschedulable_message({}, 0) == "no nodes available to schedule pods"


class TestUnschedulableMessage:
    def test_each_reason_of_a_node_counts(self) -> None:
        reasons = {"a": "Insufficient cpu, Insufficient memory", "b": "Insufficient cpu"}
        assert unschedulable_message(reasons, 2) == (
            "0/2 nodes are available: 1 Insufficient memory, 2 Insufficient cpu."
        )

    def test_sorted_as_whole_strings_like_go_sort_strings(self) -> None:
        reasons = {f"n{i}": "Insufficient cpu" for i in range(10)}
        reasons |= {"x": REASON_UNSCHEDULABLE, "y": REASON_UNSCHEDULABLE}
        assert unschedulable_message(reasons, 12) == (
            "0/12 nodes are available: 10 Insufficient cpu, 2 node(s) were unschedulable."
        )

    def test_taint_reason(self) -> None:
        taint = "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }"
        reasons = {"cp": taint, "w": "Too many pods"}
        assert unschedulable_message(reasons, 2) == (
            "0/2 nodes are available: 1 Too many pods, "
            "1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }."
        )
