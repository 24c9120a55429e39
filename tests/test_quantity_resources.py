"""gang.quantity (Kubernetes quantities) and gang.resources.pod_requests (scheduler arithmetic).

Expected values are computed by hand from the documented rules:
- quantity grammar: https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/
  <quantity> ::= <signedNumber><suffix>; <suffix> ::= <binarySI> | <decimalExponent> | <decimalSI>
- effective requests (KEP-753 "sidecar containers", "Exposing Pod Resource Requirements", and
  https://kubernetes.io/docs/concepts/workloads/pods/init-containers/#resource-sharing-within-containers):
  max(sum of app containers + all sidecars, max over init containers i of
  (init container i + sidecars started before i)) + overhead; pod-level requests win where set.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from gang.quantity import QuantityError, format_quantity, parse_quantity
from gang.resources import container_requests, format_requests, pod_requests

pytestmark = pytest.mark.unit

D = Decimal
Ki, Mi, Gi = 2**10, 2**20, 2**30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1Ki", 2**10),
        ("1Mi", 2**20),
        ("1Gi", 2**30),
        ("1Ti", 2**40),
        ("1Pi", 2**50),
        ("1Ei", 2**60),
        ("1n", D("0.000000001")),
        ("1u", D("0.000001")),
        ("500m", D("0.5")),
        ("7", 7),
        ("1k", 1000),
        ("1M", 10**6),
        ("1G", 10**9),
        ("1T", 10**12),
        ("1P", 10**15),
        ("1E", 10**18),  # a bare E is the exa suffix, not an exponent
        ("1.5Gi", 3 * 2**29),
        ("0.5", D("0.5")),
        (".5", D("0.5")),
        ("5.", 5),
        ("+2", 2),
        ("-1", -1),
        ("-250m", D("-0.25")),
        ("0", 0),
    ],
)
def test_parse_quantity_suffixes(text, expected):
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1e3", 1000), ("1E3", 1000), ("2e-3", D("0.002")), ("1.5e+2", 150), ("3e0", 3)],
)
def test_parse_quantity_decimal_exponents(text, expected):
    assert parse_quantity(text) == expected


def test_parse_quantity_numbers():
    assert parse_quantity(2) == 2
    assert parse_quantity(0.1) == D("0.1")  # via str(), not the binary float 0.1000000000000000055...


@pytest.mark.parametrize(
    "value",
    [
        "", " ", "abc", "Gi", "1Kb", "1KI", "1ki", "1 Gi", "1e", "1e3.5", ".", "1.2.3", "--1", "0x10",
        "nan", "inf", "1,5", "1Gi1",
        "1e3Ki", "1e3m",  # an exponent and a suffix together are not in the grammar
        "1e9999999",  # beyond what can be represented: still "not a quantity", not decimal.Overflow
        True, float("nan"), float("inf"), None, [1],
    ],
)
def test_parse_quantity_rejects_garbage(value):
    with pytest.raises(QuantityError):
        parse_quantity(value)


@pytest.mark.parametrize(
    ("value", "resource", "expected"),
    [
        (D(1536 * Mi), "memory", "1536Mi"),  # largest binary suffix that divides evenly
        (D(Gi), "memory", "1Gi"),
        (D(2 * Ki), "memory", "2Ki"),
        (D(2**60), "memory", "1Ei"),
        (D(1000), "memory", "1000"),  # not a multiple of 1024
        (D(0), "memory", "0"),
        (D(5 * Gi), "ephemeral-storage", "5Gi"),
        (D(Gi), "cpu", str(Gi)),  # binary suffixes only for byte counts
        (D("0.1"), "cpu", "100m"),
        (D("1.5"), "cpu", "1500m"),
        (D("1.0"), "cpu", "1"),
        (D("0.0001"), "cpu", "1m"),  # fractions of a millicore round up
        (D(2), "nvidia.com/gpu", "2"),
    ],
)
def test_format_quantity_canonical(value, resource, expected):
    assert format_quantity(value, resource) == expected


def test_format_requests_sorted_strings():
    assert list(format_requests({"memory": D(Gi), "cpu": D("0.25")}).items()) == [("cpu", "250m"), ("memory", "1Gi")]


def c(requests=None, limits=None, **extra):
    """A container with the given requests/limits (and e.g. restartPolicy)."""
    resources = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": "c", "resources": resources, **extra}


def sidecar(requests):
    return c(requests, restartPolicy="Always")


def test_container_requests_limit_defaults_a_missing_request():
    # API defaulting: a resource with a limit and no request gets request = limit, per resource.
    container = c(requests={"cpu": "500m"}, limits={"cpu": "2", "memory": "1Gi"})
    assert container_requests(container) == {"cpu": D("0.5"), "memory": Gi}


def test_empty_spec_requests_nothing():
    assert pod_requests({}) == {}
    assert pod_requests({"containers": [{"name": "c"}]}) == {}


def test_app_containers_are_summed():
    spec = {"containers": [c({"cpu": "100m", "memory": "128Mi"}), c({"cpu": "200m", "memory": "64Mi"})]}
    assert pod_requests(spec) == {"cpu": D("0.3"), "memory": 192 * Mi}


def test_init_container_max_per_resource():
    # Init containers run one at a time before the app: each resource is max(init_i, app sum).
    spec = {
        "initContainers": [c({"cpu": "2", "memory": "64Mi"}), c({"cpu": "1500m", "memory": "2Gi"})],
        "containers": [c({"cpu": "1", "memory": "1Gi"})],
    }
    assert pod_requests(spec) == {"cpu": 2, "memory": 2 * Gi}


def test_smaller_init_container_adds_nothing():
    spec = {"initContainers": [c({"cpu": "200m"})], "containers": [c({"cpu": "500m"})]}
    assert pod_requests(spec) == {"cpu": D("0.5")}


def test_sidecar_is_added_to_the_app_sum():
    # Sidecars keep running next to the app: 500m + 200m.
    spec = {"initContainers": [sidecar({"cpu": "200m"})], "containers": [c({"cpu": "500m"})]}
    assert pod_requests(spec) == {"cpu": D("0.7")}


def test_sidecar_counts_for_init_containers_started_after_it():
    # init runs while the sidecar runs: 200m + 1 = 1.2 > app 500m + 200m = 700m.
    spec = {"initContainers": [sidecar({"cpu": "200m"}), c({"cpu": "1"})], "containers": [c({"cpu": "500m"})]}
    assert pod_requests(spec) == {"cpu": D("1.2")}


def test_sidecar_does_not_count_for_init_containers_before_it():
    # init (1.5) runs before the sidecar starts: max(1.5, 200m, 500m + 200m) = 1.5, not 1.7.
    spec = {"initContainers": [c({"cpu": "1500m"}), sidecar({"cpu": "200m"})], "containers": [c({"cpu": "500m"})]}
    assert pod_requests(spec) == {"cpu": D("1.5")}


def test_mixed_init_containers_and_sidecars():
    # InitContainerUse(i) = init_i + sidecars with index < i:
    #   init-a 1 -> 1; sidecar-1 -> 200m; init-b 900m + 200m -> 1.1; sidecar-2 -> 200m + 300m = 500m
    # app + sidecars = 500m + 200m + 300m = 1.0; memory: app 1Gi + 256Mi + 128Mi vs init-b 2Gi + 256Mi.
    spec = {
        "initContainers": [
            c({"cpu": "1"}),
            sidecar({"cpu": "200m", "memory": "256Mi"}),
            c({"cpu": "900m", "memory": "2Gi"}),
            sidecar({"cpu": "300m", "memory": "128Mi"}),
        ],
        "containers": [c({"cpu": "500m", "memory": "1Gi"})],
    }
    assert pod_requests(spec) == {"cpu": D("1.1"), "memory": 2 * Gi + 256 * Mi}


def test_init_container_with_other_restart_policy_is_not_a_sidecar():
    spec = {"initContainers": [c({"cpu": "200m"}, restartPolicy="Never")], "containers": [c({"cpu": "500m"})]}
    assert pod_requests(spec) == {"cpu": D("0.5")}


def test_limits_without_requests_count_as_requests_everywhere():
    spec = {
        "initContainers": [c(limits={"memory": "3Gi"}), c(limits={"cpu": "100m"}, restartPolicy="Always")],
        "containers": [c(limits={"cpu": "1", "memory": "1Gi"})],
    }
    # cpu: app 1 + sidecar 100m = 1.1; memory: max(init 3Gi, app 1Gi).
    assert pod_requests(spec) == {"cpu": D("1.1"), "memory": 3 * Gi}


def test_overhead_is_added_after_the_init_max():
    # (max(init 2, app 1) = 2) + overhead 250m; memory 512Mi + 120Mi.
    spec = {
        "initContainers": [c({"cpu": "2"})],
        "containers": [c({"cpu": "1", "memory": "512Mi"})],
        "overhead": {"cpu": "250m", "memory": "120Mi"},
    }
    assert pod_requests(spec) == {"cpu": D("2.25"), "memory": 632 * Mi}


def test_pod_level_requests_win_where_set():
    # spec.resources.requests.cpu replaces the containers' cpu; memory still comes from containers.
    spec = {
        "resources": {"requests": {"cpu": "4"}},
        "containers": [c({"cpu": "1", "memory": "1Gi"}), c({"cpu": "1"})],
        "overhead": {"cpu": "100m"},
    }
    assert pod_requests(spec) == {"cpu": D("4.1"), "memory": Gi}


def test_pod_level_limit_without_request_defaults_to_the_containers_aggregate():
    # KEP-2837 defaulting: containers request 1Gi in all, so the apiserver sets the pod-level request to 1Gi.
    spec = {"resources": {"limits": {"memory": "8Gi"}}, "containers": [c({"cpu": "1", "memory": "1Gi"})]}
    assert pod_requests(spec) == {"cpu": 1, "memory": Gi}


def test_pod_level_limit_counts_as_request_where_no_container_requests_it():
    spec = {"resources": {"limits": {"memory": "8Gi"}}, "containers": [c({"cpu": "1"})]}
    assert pod_requests(spec) == {"cpu": 1, "memory": 8 * Gi}


def test_extended_resources_follow_the_same_rules():
    # GPUs are set as limits (request defaults to the limit): app 1 + 1 = 2; init 1 < 2.
    spec = {
        "initContainers": [c(limits={"nvidia.com/gpu": "1"})],
        "containers": [c(limits={"nvidia.com/gpu": "1"}), c({"cpu": "1"}, limits={"nvidia.com/gpu": 1})],
    }
    assert pod_requests(spec) == {"cpu": 1, "nvidia.com/gpu": 2}


def test_extended_resource_only_in_init_container_is_requested():
    spec = {"initContainers": [c(limits={"nvidia.com/gpu": "4"})], "containers": [c({"cpu": "1"})]}
    assert pod_requests(spec) == {"cpu": 1, "nvidia.com/gpu": 4}


def test_garbage_quantity_in_spec_raises():
    with pytest.raises(QuantityError):
        pod_requests({"containers": [c({"cpu": "lots"})]})
