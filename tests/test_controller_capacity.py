"""controller.capacity: free capacity of a node as kube-scheduler's NodeResourcesFit sees it.

Expected values are computed by hand from the documented rules:
- NodeResourcesFit (pkg/scheduler/framework/plugins/noderesources/fit.go, fitsRequest): a pod fits
  when len(pods on node) + 1 <= allocatable pods and, for every resource it requests with a value
  above zero, request <= allocatable - requested; a resource the node lacks counts as zero.
- The node's "requested" is the sum of the effective requests (gang.resources.pod_requests: max of
  init containers vs app containers + sidecars, plus overhead; pod-level requests win) of the pods in
  the scheduler's cache: its pod informer lists only status.phase != Succeeded/Failed, so terminal
  pods free their resources while terminating pods (deletionTimestamp set) keep them.
- Nominated pods (addGENominatedPods): pods nominated to the node with priority >= the incoming
  pod's are added to the node before Filter, each taking its requests and a pod slot.
- The allocatable is node.status.allocatable (capacity is never used).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from controller.capacity import (
    NodeUsage,
    add,
    allocatable,
    fits,
    free_capacity,
    is_terminal,
    node_usage,
    pod_usage,
    requests_of,
    shortfall,
    subtract,
    with_pod_slot,
)

pytestmark = pytest.mark.unit

D = Decimal
Gi = 2**30


def node(**allocatable_: str) -> dict[str, Any]:
    return {"metadata": {"name": "n1"},
            "status": {"capacity": {"cpu": "64", "memory": "256Gi", "pods": "250"},
                       "allocatable": allocatable_ or {"cpu": "8", "memory": "32Gi", "pods": "110"}}}


def pod(cpu: str = "1", phase: str = "Running", deleting: bool = False, **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "namespace": "default"}
    if deleting:
        metadata["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    containers = [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]
    return {"metadata": metadata, "spec": {"nodeName": "n1", "containers": containers, **spec},
            "status": {"phase": phase}}


# --- arithmetic ------------------------------------------------------------------------------------


def test_add_and_subtract_per_resource_without_mutating():
    a = {"cpu": D(2), "memory": D(Gi)}
    b = {"cpu": D("0.5"), "nvidia.com/gpu": D(1)}
    assert add(a, b) == {"cpu": D("2.5"), "memory": D(Gi), "nvidia.com/gpu": D(1)}
    assert subtract(a, b) == {"cpu": D("1.5"), "memory": D(Gi), "nvidia.com/gpu": D(-1)}
    assert a == {"cpu": D(2), "memory": D(Gi)} and b == {"cpu": D("0.5"), "nvidia.com/gpu": D(1)}


def test_subtract_keeps_overcommitment_negative():
    assert subtract({"cpu": D(1)}, {"cpu": D(3)}) == {"cpu": D(-2)}


def test_fits_within_free():
    free = {"cpu": D(2), "memory": D(4 * Gi), "pods": D(1)}
    assert fits({"cpu": D(2), "memory": D(4 * Gi), "pods": D(1)}, free)  # exactly full fits
    assert fits({}, free)
    assert not fits({"cpu": D("2.001")}, free)
    assert not fits({"pods": D(1)}, {"cpu": D(8), "pods": D(0)})  # "Too many pods"


def test_missing_resource_is_zero_and_zero_requests_always_fit():
    assert not fits({"nvidia.com/gpu": D(1)}, {"cpu": D(8)})
    # fitsRequest skips requests of zero, so an over-committed resource doesn't block them.
    assert fits({"cpu": D(0), "nvidia.com/gpu": D(0)}, {"cpu": D(-1)})


def test_shortfall_lists_what_is_missing():
    free = {"cpu": D(2), "memory": D(Gi), "pods": D(3)}
    requests = {"cpu": D(3), "memory": D(Gi), "nvidia.com/gpu": D(2), "pods": D(1), "example.com/x": D(0)}
    assert shortfall(requests, free) == {"cpu": D(1), "nvidia.com/gpu": D(2)}
    assert shortfall({"cpu": D(1)}, free) == {}
    assert list(shortfall({"z": D(1), "a": D(1)}, {})) == ["a", "z"]  # sorted, for stable messages


def test_shortfall_agrees_with_fits():
    free = {"cpu": D(2), "memory": D(-1)}
    for requests in ({"cpu": D(2)}, {"cpu": D(3)}, {"memory": D(0)}, {"memory": D(1)}, {}):
        assert fits(requests, free) == (shortfall(requests, free) == {})


def test_with_pod_slot_is_idempotent():
    assert with_pod_slot({"cpu": D(1)}) == {"cpu": D(1), "pods": D(1)}
    assert with_pod_slot(with_pod_slot({})) == {"pods": D(1)}


# --- node and pod inputs ------------------------------------------------------------------------------


def test_allocatable_parses_status_allocatable_including_pods_not_capacity():
    assert allocatable(node()) == {"cpu": D(8), "memory": D(32 * Gi), "pods": D(110)}
    assert allocatable(node(cpu="7500m", **{"nvidia.com/gpu": "4", "pods": "16"})) == \
        {"cpu": D("7.5"), "nvidia.com/gpu": D(4), "pods": D(16)}
    assert allocatable({"metadata": {"name": "bare"}}) == {}


def test_requests_of_pod_spec_and_expected_member():
    spec = {"containers": [{"name": "a", "resources": {"requests": {"cpu": "500m"}}}]}
    assert requests_of(spec) == {"cpu": D("0.5")}
    member = {"role": "executor", "count": 2, "requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "0"},
              "nodeSelector": {}, "tolerations": [], "affinity": None}
    assert requests_of(member) == {"cpu": D(2), "memory": D(4 * Gi)}
    assert requests_of({"requests": None}) == {}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # Init containers run one at a time before the app: max(largest init, sum of app containers).
        ({"initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}],
          "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}},
                         {"name": "b", "resources": {"requests": {"cpu": "1"}}}]},
         {"cpu": D(4), "pods": D(1)}),
        # A sidecar runs beside the app and beside the init containers started after it:
        # max(sidecar 1 + app 2, sidecar 1 + later init 2) = 3.
        ({"initContainers": [{"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                             {"name": "i", "resources": {"requests": {"cpu": "2"}}}],
          "containers": [{"name": "a", "resources": {"requests": {"cpu": "2"}}}]},
         {"cpu": D(3), "pods": D(1)}),
        # RuntimeClass overhead is added on top.
        ({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
          "overhead": {"cpu": "250m", "memory": "120Mi"}},
         {"cpu": D("1.25"), "memory": D(Gi + 120 * 2**20), "pods": D(1)}),
        # A limit without a request defaults the request.
        ({"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
         {"nvidia.com/gpu": D(2), "pods": D(1)}),
        # A BestEffort pod requests nothing but still takes a pod slot.
        ({"containers": [{"name": "a"}]}, {"pods": D(1)}),
    ],
)
def test_pod_usage_counts_like_the_scheduler(spec, expected):
    assert pod_usage({"spec": spec}) == expected


@pytest.mark.parametrize(
    ("phase", "deleting", "terminal"),
    [("Succeeded", False, True), ("Failed", False, True), ("Succeeded", True, True),
     ("Running", False, False), ("Pending", False, False), ("Unknown", False, False),
     ("Running", True, False)],  # terminating: still holds its resources until it is gone
)
def test_terminal_means_succeeded_or_failed(phase, deleting, terminal):
    assert is_terminal(pod(phase=phase, deleting=deleting)) is terminal


# --- free capacity -------------------------------------------------------------------------------------


def test_free_capacity_counts_every_term():
    pods = [pod("2"), pod("1", deleting=True), pod("3", phase="Succeeded"), pod("1", phase="Failed")]
    reserved = {"cpu": D(1), "pods": D(1)}  # one released, not yet bound member
    nominated = [(100, {"cpu": D(1)}), (50, {"cpu": D(2)})]
    # cpu: 8 - (2 + 1 terminating) - 1 reserved - 1 nominated at priority >= 100 = 3
    # pods: 110 - 2 counted pods - 1 reserved - 1 nominated = 106
    assert free_capacity(node(), pods, reserved, nominated, gang_priority=100) == \
        {"cpu": D(3), "memory": D(32 * Gi), "pods": D(106)}


@pytest.mark.parametrize(
    ("gang_priority", "cpu", "pods"),
    [(-10, 4, 107), (0, 4, 107), (1, 5, 108), (10, 5, 108), (11, 8, 109), (1000, 8, 109), (1001, 8, 110)],
)
def test_nominated_pods_count_when_their_priority_is_at_least_the_gangs(gang_priority, cpu, pods):
    # Priorities 0, 10 and 1000; the last requests nothing but still takes a pod slot.
    nominated = [(0, {"cpu": D(1)}), (10, {"cpu": D(3)}), (1000, {})]
    assert free_capacity(node(), [], None, nominated, gang_priority) == \
        {"cpu": D(cpu), "memory": D(32 * Gi), "pods": D(pods)}


def test_nominated_entries_get_exactly_one_slot():
    free = free_capacity(node(), [], None, [(0, with_pod_slot({"cpu": D(1)}))], 0)
    assert free["pods"] == D(109)


def test_terminal_pods_free_their_pod_slot_and_terminating_ones_do_not():
    full = node(cpu="8", pods="2")
    assert free_capacity(full, [pod("1"), pod("1", deleting=True)], None, [], 0)["pods"] == 0
    assert free_capacity(full, [pod("1"), pod("1", phase="Succeeded")], None, [], 0)["pods"] == 1
    member = with_pod_slot({"cpu": D(1)})
    assert not fits(member, free_capacity(full, [pod("1"), pod("1", deleting=True)], None, [], 0))
    assert fits(member, free_capacity(full, [pod("1"), pod("1", phase="Failed")], None, [], 0))


def test_bound_pod_requests_follow_pod_requests_rules():
    sidecar = pod("2", initContainers=[{"name": "proxy", "restartPolicy": "Always",
                                        "resources": {"requests": {"cpu": "500m"}}}],
                  overhead={"cpu": "100m"})
    assert free_capacity(node(), [sidecar], None, [], 0)["cpu"] == D("5.4")  # 8 - (2 + 0.5 + 0.1)


def test_overcommitted_node_stays_negative():
    static = [pod("6"), pod("4")]
    free = free_capacity(node(), static, None, [], 0)
    assert free["cpu"] == D(-2)
    assert not fits({"cpu": D("0.1")}, free)
    assert fits(with_pod_slot({"memory": D(Gi)}), free)  # a request of no cpu is not blocked by cpu


def test_node_usage_keeps_terms_apart_and_is_pure():
    pods = [pod("2")]
    reserved = {"cpu": D(1), "pods": D(1)}
    usage = node_usage(node(), pods, reserved, [(5, {"cpu": D(1)})])
    assert usage == NodeUsage(
        allocatable={"cpu": D(8), "memory": D(32 * Gi), "pods": D(110)},
        used={"cpu": D(2), "pods": D(1)},
        reserved={"cpu": D(1), "pods": D(1)},
        nominated=((5, {"cpu": D(1), "pods": D(1)}),),
    )
    assert usage.free(5) == {"cpu": D(4), "memory": D(32 * Gi), "pods": D(107)}
    assert usage.free(6) == {"cpu": D(5), "memory": D(32 * Gi), "pods": D(108)}
    assert usage.free(5) == usage.free(5)  # no state carried between calls
    assert reserved == {"cpu": D(1), "pods": D(1)} and pods == [pod("2")]


def test_empty_node_usage():
    usage = node_usage(node(), [])
    assert usage.used == {} and usage.reserved == {} and usage.nominated == ()
    assert usage.free(0) == allocatable(node())
