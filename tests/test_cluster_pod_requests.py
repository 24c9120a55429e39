"""cluster.pod_requests: a pod's requests as kube-scheduler counts them, table by table.

Expected values are worked out by hand from the upstream rules, not from the code:
- KEP-753 (sidecar containers), "Resources calculation for scheduling and pod admission":
  InitContainerUse(i) = sum(restartable init containers with index < i) + init container i; the pod requests
  max(max_i InitContainerUse(i), sum(app containers) + sum(restartable init containers)), per resource;
- component-helpers/resource PodRequests: pod-level requests (cpu, memory) in place of the containers', then
  spec.overhead added; NonMissingContainerRequests stands in only where a container sets no request at all;
- SetDefaults_Pod: a container's limit without a request is its request; KEP-2837 "Proposed Validation &
  Defaulting Rules": with pod-level limits, a missing pod-level request is the containers' aggregate for that
  resource when any container requests it, else the pod-level limit.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from cluster.pod_requests import pod_requests
from cluster.quantity import QuantityError

pytestmark = pytest.mark.unit

D = Decimal
Mi, Gi = 2**20, 2**30
GPU = "nvidia.com/gpu"


def c(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A container with these requests and limits (and e.g. restartPolicy)."""
    resources = {key: value for key, value in (("requests", requests), ("limits", limits)) if value is not None}
    return {"name": "c", "image": "busybox", "resources": resources, **extra}


def sidecar(requests: dict[str, Any]) -> dict[str, Any]:
    return c(requests, restartPolicy="Always")


def nonzero(requests: dict[str, Decimal]) -> dict[str, Decimal]:
    return {name: value for name, value in requests.items() if value}


CASES: dict[str, tuple[dict[str, Any], dict[str, Decimal | int]]] = {
    "nothing requested": ({"containers": [{"name": "c", "image": "busybox"}]}, {}),
    "app containers are summed": (
        {"containers": [c({"cpu": "100m", "memory": "128Mi"}), c({"cpu": "200m", "memory": "64Mi"})]},
        {"cpu": D("0.3"), "memory": 192 * Mi}),
    "a limit without a request is the request, per resource": (
        {"containers": [c({"cpu": "500m"}, {"cpu": "2", "memory": "1Gi"})]}, {"cpu": D("0.5"), "memory": Gi}),
    "an init container bigger than the app sets the request": (
        {"initContainers": [c({"cpu": "2", "memory": "64Mi"}), c({"cpu": "1500m", "memory": "2Gi"})],
         "containers": [c({"cpu": "1", "memory": "1Gi"})]},
        {"cpu": 2, "memory": 2 * Gi}),
    "a smaller init container adds nothing": (
        {"initContainers": [c({"cpu": "200m"})], "containers": [c({"cpu": "500m"})]}, {"cpu": D("0.5")}),
    "a sidecar runs next to the app": (
        {"initContainers": [sidecar({"cpu": "200m"})], "containers": [c({"cpu": "500m"})]}, {"cpu": D("0.7")}),
    "an init container after a sidecar runs next to it": (  # 200m + 1 > 500m + 200m
        {"initContainers": [sidecar({"cpu": "200m"}), c({"cpu": "1"})], "containers": [c({"cpu": "500m"})]},
        {"cpu": D("1.2")}),
    "an init container before a sidecar runs alone": (  # max(1.5, 200m, 500m + 200m)
        {"initContainers": [c({"cpu": "1500m"}), sidecar({"cpu": "200m"})], "containers": [c({"cpu": "500m"})]},
        {"cpu": D("1.5")}),
    "sidecars and init containers interleaved": (
        # cpu: init-a 1; sidecar-1 200m; init-b 900m + 200m = 1.1; sidecar-2 500m; app 500m + 500m = 1.0 -> 1.1
        # memory: init-b 2Gi + 256Mi against app 1Gi + 256Mi + 128Mi -> 2Gi + 256Mi
        {"initContainers": [c({"cpu": "1"}), sidecar({"cpu": "200m", "memory": "256Mi"}),
                            c({"cpu": "900m", "memory": "2Gi"}), sidecar({"cpu": "300m", "memory": "128Mi"})],
         "containers": [c({"cpu": "500m", "memory": "1Gi"})]},
        {"cpu": D("1.1"), "memory": 2 * Gi + 256 * Mi}),
    "only restartPolicy Always makes a sidecar": (
        {"initContainers": [c({"cpu": "200m"}, restartPolicy="Never")], "containers": [c({"cpu": "500m"})]},
        {"cpu": D("0.5")}),
    "a sidecar's limit is its request too": (  # cpu: app 1 + sidecar 100m; memory: max(init 3Gi, app 1Gi)
        {"initContainers": [c(limits={"memory": "3Gi"}), c(limits={"cpu": "100m"}, restartPolicy="Always")],
         "containers": [c(limits={"cpu": "1", "memory": "1Gi"})]},
        {"cpu": D("1.1"), "memory": 3 * Gi}),
    "overhead comes on top of the init maximum": (  # max(2, 1) + 250m; 512Mi + 120Mi
        {"initContainers": [c({"cpu": "2"})], "containers": [c({"cpu": "1", "memory": "512Mi"})],
         "overhead": {"cpu": "250m", "memory": "120Mi"}},
        {"cpu": D("2.25"), "memory": 632 * Mi}),
    "extended resources: limits are requests, summed and maxed like the rest": (
        {"initContainers": [c(limits={GPU: "1"})], "containers": [c(limits={GPU: "1"}), c({"cpu": "1"}, {GPU: 1})]},
        {"cpu": 1, GPU: 2}),
    "an extended resource only an init container asks for is requested": (
        {"initContainers": [c(limits={GPU: "4"})], "containers": [c({"cpu": "1"})]}, {"cpu": 1, GPU: 4}),
    "pod-level requests replace the containers' cpu and memory, overhead still added": (
        {"resources": {"requests": {"cpu": "4"}}, "containers": [c({"cpu": "1", "memory": "1Gi"}), c({"cpu": "1"})],
         "overhead": {"cpu": "100m"}},
        {"cpu": D("4.1"), "memory": Gi}),
    "pod-level resources other than cpu and memory are not pod-level": (
        {"resources": {"requests": {GPU: "8", "memory": "2Gi"}}, "containers": [c({GPU: "1"}, {GPU: "1"})]},
        {GPU: 1, "memory": 2 * Gi}),
    "a pod-level limit alone defaults the pod-level request to the containers' aggregate": (
        # KEP-2837: containers request memory (1Gi + max(init 3Gi)) -> pod-level request 3Gi, not the 8Gi limit
        {"resources": {"limits": {"memory": "8Gi", "cpu": "4"}},
         "initContainers": [c({"memory": "3Gi"})], "containers": [c({"cpu": "1", "memory": "1Gi"})]},
        {"cpu": 1, "memory": 3 * Gi}),
    "a pod-level limit no container requests for is the pod-level request": (  # KEP-2837 example 1 (row 5)
        {"resources": {"limits": {"memory": "8Gi"}}, "containers": [c({"cpu": "1"})]}, {"cpu": 1, "memory": 8 * Gi}),
    "a pod-level request wins over the defaulting from a pod-level limit": (
        {"resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "8Gi"}},
         "containers": [c({"memory": "1Gi"})]},
        {"memory": 2 * Gi}),
}


@pytest.mark.parametrize(("spec", "expected"), CASES.values(), ids=CASES.keys())
def test_pod_requests(spec: dict[str, Any], expected: dict[str, Decimal | int]) -> None:
    assert nonzero(pod_requests(spec)) == expected


def test_an_explicit_zero_is_a_request_the_scorer_keeps() -> None:
    """NonMissingContainerRequests fills in only what a container does not request at all (limits count)."""
    non_missing = {"cpu": D("0.1"), "memory": D(200 * Mi)}
    spec = {"initContainers": [sidecar({"cpu": "0"})],
            "containers": [c({"cpu": "0"}), c(), c(limits={"memory": "1Gi"})]}
    # cpu: 0 + 100m + 100m + sidecar 0; memory: 200Mi + 200Mi + 1Gi + sidecar 200Mi
    assert pod_requests(spec, non_missing) == {"cpu": D("0.2"), "memory": 600 * Mi + Gi}
    assert pod_requests(spec) == {"cpu": 0, "memory": Gi}  # the zero cpu request is kept as a name


def test_quantities_are_read_as_the_apiserver_reads_them() -> None:
    """JSON numbers and strings alike; finer than 1n rounds up to 1n (resource.Quantity)."""
    spec = {"containers": [c({"cpu": 0.5, "memory": "1.5Gi", "ephemeral-storage": "1e3"}),
                           c({"cpu": "0.0000000001"})]}
    assert pod_requests(spec) == {"cpu": D("0.500000001"), "memory": 3 * Gi // 2, "ephemeral-storage": 1000}


def test_a_malformed_quantity_is_an_error() -> None:
    with pytest.raises(QuantityError):
        pod_requests({"containers": [c({"cpu": "lots"})]})
