"""Disruption budgets on a running local cluster: the disruption controller runs with the other components, and
the eviction subresource honours what it computes (Kubernetes docs: Disruptions, API-initiated Eviction)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from cluster.local import LocalCluster, NodeSpec
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

TIMEOUT = 15.0
APP = {"app": "web"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(nodes=[NodeSpec("node-a", cpu="4")]) as local:
        local.run_components(start_seconds=0.05, operators=False, stop_seconds=0.1)
        yield local


@pytest.fixture
def ns(core: client.CoreV1Api) -> str:
    name = f"pdb-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture(scope="module")
def policy(api: client.ApiClient) -> client.PolicyV1Api:
    return client.PolicyV1Api(api)


def running_pods(core: client.CoreV1Api, ns: str, count: int) -> list[str]:
    names = [f"web-{i}" for i in range(count)]
    for name in names:
        core.create_namespaced_pod(ns, {"metadata": {"name": name, "labels": APP}, "spec": {
            "terminationGracePeriodSeconds": 1, "containers": [{"name": "c", "image": "busybox"}]}})
    wait_for(lambda: all(p.status.phase == "Running" for p in core.list_namespaced_pod(ns).items), TIMEOUT,
             "pods Running")
    return names


def allowed(policy: client.PolicyV1Api, ns: str, expected: int) -> Any:
    return wait_for(lambda: (s := policy.read_namespaced_pod_disruption_budget("web", ns).status)
                    and s.disruptions_allowed == expected and s.observed_generation == 1 and s,
                    TIMEOUT, f"disruptionsAllowed {expected}")


def test_the_disruption_controller_keeps_the_budget_s_status(core: client.CoreV1Api, policy: client.PolicyV1Api,
                                                             ns: str) -> None:
    running_pods(core, ns, 3)
    policy.create_namespaced_pod_disruption_budget(ns, {"metadata": {"name": "web"}, "spec": {
        "minAvailable": 2, "selector": {"matchLabels": APP}}})
    status = allowed(policy, ns, 1)
    assert (status.expected_pods, status.desired_healthy, status.current_healthy) == (3, 2, 3)
    assert [(c.type, c.status, c.reason) for c in status.conditions] == [
        ("DisruptionAllowed", "True", "SufficientPods")]


def test_evictions_honour_the_budget_and_the_pod_terminates(core: client.CoreV1Api, policy: client.PolicyV1Api,
                                                            ns: str) -> None:
    """The first eviction uses the one disruption allowed (the pod is recorded, terminates, and is gone); the
    next is refused with 429 while the budget is short."""
    first, second, _ = running_pods(core, ns, 3)
    policy.create_namespaced_pod_disruption_budget(ns, {"metadata": {"name": "web"}, "spec": {
        "minAvailable": 2, "selector": {"matchLabels": APP}}})
    allowed(policy, ns, 1)

    def evict(name: str) -> None:
        core.create_namespaced_pod_eviction(name, ns, {"apiVersion": "policy/v1", "kind": "Eviction",
                                                       "metadata": {"name": name}})

    evict(first)
    with pytest.raises(client.ApiException) as refused:
        evict(second)
    assert refused.value.status == 429
    wait_for(lambda: first not in {p.metadata.name for p in core.list_namespaced_pod(ns).items}, TIMEOUT,
             f"{first} gone")
    status = wait_for(lambda: (s := policy.read_namespaced_pod_disruption_budget("web", ns).status).expected_pods == 2
                      and s, TIMEOUT, "the evicted pod out of the budget")
    assert (status.current_healthy, status.disruptions_allowed, status.disrupted_pods) == (2, 0, None)
