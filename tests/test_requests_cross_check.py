"""Two independent countings of a pod's requests agree: the product's (gang.resources, what the webhook announces
and the gate controller plans with) and the emulator's (cluster.pod_requests, what the local scheduler and kubelets
place by), each written from kube-scheduler's rules. A counting bug in either shows up here as a disagreement,
on random pod shapes the apiserver accepts: app containers, init containers and sidecars, requests and limits of
native and extended resources, spec.overhead, and pod-level cpu and memory.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cluster.pod_requests import pod_requests as emulator_requests
from gang.resources import pod_requests as product_requests

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"
NATIVE = ("cpu", "memory", "ephemeral-storage")
EXTENDED = (GPU, "example.com/fpga")

whole = st.integers(min_value=0, max_value=64)
native_quantity = st.one_of(
    whole, whole.map(str), st.integers(min_value=0, max_value=64_000).map(lambda n: f"{n}m"),
    st.builds(lambda n, suffix: f"{n}{suffix}", st.integers(min_value=0, max_value=4096),
              st.sampled_from(["Ki", "Mi", "Gi", "k", "M", "G"])),
    st.sampled_from(["0.5", "1.5", "2.25Gi", "0.1", "1e3", "250m"]))
extended_quantity = st.one_of(whole, whole.map(str))


@st.composite
def container_resources(draw: st.DrawFn) -> dict[str, Any]:
    """requests and limits: native resources with a request, a limit or both (drawn apart: which one counts is the
    point), extended resources with a limit and maybe the same request (the apiserver wants them equal)."""
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    for name in draw(st.sets(st.sampled_from(NATIVE))):
        where = draw(st.sampled_from(["requests", "limits", "both"]))
        if where != "limits":
            requests[name] = draw(native_quantity)
        if where != "requests":
            limits[name] = draw(native_quantity)
    for name in draw(st.sets(st.sampled_from(EXTENDED))):
        value = draw(extended_quantity)
        target = draw(st.sampled_from([[limits], [requests, limits]]))
        for part in target:
            part[name] = value
    return {key: value for key, value in (("requests", requests), ("limits", limits)) if value}


def container(restart_policy: st.SearchStrategy[str | None]) -> st.SearchStrategy[dict[str, Any]]:
    def build(resources: dict[str, Any], policy: str | None) -> dict[str, Any]:
        made: dict[str, Any] = {"name": "c", "image": "busybox", "resources": resources}
        if policy is not None:
            made["restartPolicy"] = policy
        return made

    return st.builds(build, container_resources(), restart_policy)


pod_level_list = st.dictionaries(st.sampled_from(["cpu", "memory"]), native_quantity, min_size=1)


specs = st.fixed_dictionaries(
    {"containers": st.lists(container(st.none()), min_size=1, max_size=4)},
    optional={
        "initContainers": st.lists(container(st.sampled_from([None, "Always", "Always", "Never"])), max_size=4),
        "overhead": st.dictionaries(st.sampled_from(["cpu", "memory"]), native_quantity, min_size=1),
        # Pod-level requests and limits (KEP-2837) of cpu and memory, the only resources the apiserver takes there.
        "resources": st.fixed_dictionaries({}, optional={"requests": pod_level_list, "limits": pod_level_list}),
    })


def counted(requests: dict[str, Decimal]) -> dict[str, Decimal]:
    return {name: value for name, value in requests.items() if value}


@settings(max_examples=500, deadline=None)
@given(spec=specs)
@example(spec={"initContainers": [{"name": "i", "resources": {"requests": {"cpu": "0"}}}],
               "containers": [{"name": "c", "resources": {}}],
               "resources": {"requests": {"memory": "0"}, "limits": {"cpu": "1"}}})
@example(spec={"initContainers": [{"name": "s", "resources": {"requests": {"cpu": "200m"}}, "restartPolicy": "Always"},
                                  {"name": "i", "resources": {"requests": {"cpu": "1"}}}],
               "containers": [{"name": "c", "resources": {"limits": {"cpu": "500m", GPU: "1"}}}],
               "overhead": {"cpu": "250m"}})
def test_product_and_emulator_count_the_same_requests(spec: dict[str, Any]) -> None:
    assert counted(product_requests(spec)) == counted(emulator_requests(spec))


def test_a_pod_level_limit_alone_counts_the_containers_aggregate() -> None:
    """KEP-2837, "Clarifying Tricky Cases" 3: a pod-level memory limit of 8Gi and containers requesting 1Gi in all:
    the apiserver sets the pod-level request to 1Gi, and kube-scheduler places the pod by 1Gi."""
    spec = {"resources": {"limits": {"memory": "8Gi"}},
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"memory": "1Gi"}}}]}
    assert counted(emulator_requests(spec)) == {"memory": 2**30}
    assert counted(product_requests(spec)) == counted(emulator_requests(spec))
